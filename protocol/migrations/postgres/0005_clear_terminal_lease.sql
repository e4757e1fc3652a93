-- Restores the invariant "a lease exists only while running" on rows written
-- by older SDKs that left lease_until_ms behind on terminal tasks.
update cairnq_tasks set lease_until_ms = null
    where status <> 'running' and lease_until_ms is not null;

update cairnq_meta set value = '5' where key = 'schema_version';
