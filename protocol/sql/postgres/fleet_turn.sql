-- A fleet member's turn (cairnq/store/postgres/fleet.py): which members are
-- there. Each member's fleet session (a connection of its own) carries the
-- mark :prefix || <worker id> as its application_name, so the sessions of the
-- database named so are the fleet, alive; a killed worker's session ends and
-- it is gone. pg_stat_activity shows every role's application_name, so
-- members running as different roles still see each other.
select substr(application_name, length(:prefix) + 1) as member
from pg_stat_activity
where datname = current_database()
  and left(application_name, length(:prefix)) = :prefix
