-- Expired-lease lookups (recover_leases, the claimable probe) read only the
-- running rows that hold a lease.
create index if not exists cairnq_tasks_lease_idx on cairnq_tasks (lease_until_ms)
    where status = 'running' and lease_until_ms is not null;

update cairnq_meta set value = '4' where key = 'schema_version';
