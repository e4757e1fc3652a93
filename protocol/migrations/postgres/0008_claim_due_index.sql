-- Claim order became (priority desc, run_at_ms, id): delayed tasks are ordered
-- by when they fall due, and the id makes ties deterministic. Same index names,
-- new columns, so both are dropped and rebuilt (holding the write lock).
drop index if exists cairnq_tasks_claim_idx;
create index cairnq_tasks_claim_idx
    on cairnq_tasks (queue, status, priority desc, run_at_ms, id);

drop index if exists cairnq_tasks_claim_name_idx;
create index cairnq_tasks_claim_name_idx
    on cairnq_tasks (queue, status, name, priority desc, run_at_ms, id);

update cairnq_meta set value = '8' where key = 'schema_version';
