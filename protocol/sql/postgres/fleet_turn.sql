-- A fleet member's turn (cairnq/store/postgres/fleet.py): which members are
-- there. Each member's listening session last ran LISTEN on a channel of its
-- own, named :prefix || <worker id> (its only trace: nothing is ever sent
-- there), so the sessions of the database whose last command starts with
-- 'listen "' || :prefix are the fleet, alive; a killed worker's session ends
-- and it is gone. Sessions this role may not see (pg_stat_activity hides
-- other roles' commands) are not counted: a member that does not find itself
-- acts alone.
select substr(query, length(:prefix) + 9, length(query) - length(:prefix) - 9) as member
from pg_stat_activity
where datname = current_database()
  and left(query, length(:prefix) + 8) = 'listen "' || :prefix
