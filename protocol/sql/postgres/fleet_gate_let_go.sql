-- The leader stops keeping the gate (it no longer leads): every member waiting
-- behind it is granted, and looks for the new leader soon.
select pg_advisory_unlock(:gate_class::int4, :gate::int4) as let_go
