-- complete for many tasks of one worker that share one result (a drain of
-- handlers returning the same value, typically None, settles in one statement
-- instead of one per task). Per row exactly complete.sql: ownership-checked,
-- cancel wins. Returns the rows it settled; an id missing lost its lease.
-- The unary + keeps the planner off the status indexes: it must look each id
-- up by primary key, not walk every running row.
update cairnq_tasks
set status = case when cancel_requested_at_ms is null then 'succeeded' else 'canceled' end,
    result = case when cancel_requested_at_ms is null then :result else result end,
    progress = case when cancel_requested_at_ms is null then 1.0 else progress end,
    lease_until_ms = null,
    completed_at_ms = :now_ms,
    updated_at_ms = :now_ms
where id in (select value from json_each(:ids))
  and +status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > :now_ms
returning id, status
