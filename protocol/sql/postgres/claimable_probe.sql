-- Is a claim worth a transaction? True when a task of one of :queues and :names
-- is due, or when any lease anywhere has expired (not filtered: recovering a
-- dead worker's tasks is every claimer's job). Two EXISTS so each arm reaches
-- its own index; the clock is read once, in a sub-select, so it can bound the
-- index scans. The store plans it per call with its actual parameters: for a
-- name with nothing queued the planner then seeks cairnq_tasks_name_idx
-- instead of walking the backlog of the names that have work.
select exists (
           select 1
           from cairnq_tasks
           where queue = any(:queues::text[])
             and status = 'queued'
             and name = any(:names::text[])
             and run_at_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       )
    or exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as has_work
