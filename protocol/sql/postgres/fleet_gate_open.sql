-- The leader opens the gate for a moment: it lets go of its lock (every member
-- waiting behind it is granted at once, and lets go as its own statement
-- ends), then takes it again, waiting behind those grants only; a member that
-- comes back to the gate meanwhile queues behind this request. The FROM row
-- (the let-go) is made before the select list (the taking again) is read. The
-- wait for the grants is capped by :timeout_ms (lock_timeout): past it the
-- statement fails and the leader no longer keeps the gate.
select (select true from pg_advisory_lock(:gate_class::int4, :gate::int4)) as kept
from (select set_config('lock_timeout', :timeout_ms::text, false),
             pg_advisory_unlock(:gate_class::int4, :gate::int4) as let_go) as opened
