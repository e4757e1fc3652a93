-- Serialize every keyed transaction on the key, until commit or rollback. The
-- hash function and its seed are wire format: every SDK takes exactly this lock,
-- so mixed fleets exclude each other.
select pg_advisory_xact_lock(hashtextextended(:key::text, 0)) as locked
