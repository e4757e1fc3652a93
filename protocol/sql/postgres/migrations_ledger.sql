-- The migration ledger. Not part of any migration file: the runner creates it
-- before looking at the migrations, on every connect.
create table if not exists cairnq_migrations (
    name text primary key,
    applied_at_ms bigint not null
)
