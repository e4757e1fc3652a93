-- How a worker finishes a handler: succeeded with the result, unless a cancel
-- was requested meanwhile, in which case canceled and the result is dropped.
-- Ownership-checked.
update cairnq_tasks
set status = case when cancel_requested_at_ms is null then 'succeeded' else 'canceled' end,
    result = case when cancel_requested_at_ms is null then :result::jsonb else result end,
    progress = case when cancel_requested_at_ms is null then 1.0 else progress end,
    lease_until_ms = null,
    completed_at_ms = (extract(epoch from now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > (extract(epoch from now()) * 1000)::bigint
returning *
