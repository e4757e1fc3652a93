-- A member that does not lead waits at the gate for up to :timeout_ms (its
-- next turn). Its session listens to nothing, so while it waits it costs the
-- database no transaction, not even for notifications (on PostgreSQL 15 every
-- notification costs one in every listening session). 'opened': the leader
-- opened the gate (or its session ended); 'unkept': nobody keeps it, so there
-- is nothing to wait behind. The shared lock is the transaction's: let go as
-- the statement ends. The FROM row (lock_timeout set) is made before the
-- select list is read. Past :timeout_ms (milliseconds, at least 1: 0 would
-- mean no limit) it fails with lock_not_available (55P03): the turn.
select case
           when pg_try_advisory_xact_lock_shared(:gate_class::int4, :gate::int4) then 'unkept'
           else (select 'opened' from pg_advisory_xact_lock_shared(:gate_class::int4, :gate::int4))
       end as gate
from (select set_config('lock_timeout', :timeout_ms::text, false)) as armed
