-- Does the migration ledger exist (in this connection's schema)? Asked after a
-- concurrent cold start lost the race to create it.
select to_regclass('cairnq_migrations') is not null as present
