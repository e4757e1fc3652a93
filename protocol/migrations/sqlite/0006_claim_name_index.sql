-- Per-name draws pin (queue, status, name) and then read in claim order, so a
-- draw for a name with nothing queued is a seek rather than a walk over the
-- whole backlog of other names. 0008 rebuilds it in the final claim order.
create index if not exists cairnq_tasks_claim_name_idx
    on cairnq_tasks (queue, status, name, priority desc, created_at_ms);

update cairnq_meta set value = '6' where key = 'schema_version';
