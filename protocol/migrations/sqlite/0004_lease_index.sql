-- Expired-lease lookups (recover_leases, the claimable probe) read only the
-- running rows that hold a lease. SQLite uses this partial index only when the
-- query repeats both predicate terms word for word.
create index if not exists cairnq_tasks_lease_idx on cairnq_tasks (lease_until_ms)
    where status = 'running' and lease_until_ms is not null;

update cairnq_meta set value = '4' where key = 'schema_version';
