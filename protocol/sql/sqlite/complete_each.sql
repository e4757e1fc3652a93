-- complete for many tasks of one worker, each with its own result (a drain
-- of handlers returning different values settles in one statement per poll
-- instead of one per task). :ids and :results are JSON arrays of the same
-- length, paired by position; each result is the JSON text to store (a JSON
-- string holding it) or null. Per row exactly complete.sql: ownership-checked,
-- cancel wins. Returns the rows it settled; an id missing lost its lease.
-- The unary + keeps the planner off the status indexes: each id is looked up
-- by primary key.
update cairnq_tasks
set status = case when cancel_requested_at_ms is null then 'succeeded' else 'canceled' end,
    result = case when cancel_requested_at_ms is null then s.result else cairnq_tasks.result end,
    progress = case when cancel_requested_at_ms is null then 1.0 else progress end,
    lease_until_ms = null,
    completed_at_ms = :now_ms,
    updated_at_ms = :now_ms
from (
    select i.value as id, r.value as result
    from json_each(:ids) as i
    join json_each(:results) as r on r.key = i.key
) as s
where cairnq_tasks.id = s.id
  and +cairnq_tasks.status = 'running'
  and cairnq_tasks.worker_id = :worker_id
  and cairnq_tasks.lease_until_ms > :now_ms
returning id, status
