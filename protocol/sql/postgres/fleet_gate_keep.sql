-- The fleet's leader keeps the gate (cairnq/store/postgres/fleet_session.py):
-- a session-level exclusive advisory lock on (:gate_class, :gate), in the
-- two-key space, so it never meets the one-key locks of keyed submits. The
-- other members wait behind it; false when another session keeps it already.
select pg_try_advisory_lock(:gate_class::int4, :gate::int4) as kept
