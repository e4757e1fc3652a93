-- cairnq: fill-row status='running' worker_id lease_until_ms updated_at_ms=:now_ms queue name
-- Draw up to :limit due tasks of one queue and one name, in claim order
-- (priority desc, run_at_ms, id). Both equalities pin the leading columns of
-- cairnq_tasks_claim_name_idx, so this is a seek that stops after :limit rows
-- however deep the backlog of other names is.
update cairnq_tasks
set status = 'running',
    worker_id = :worker_id,
    lease_until_ms = :lease_until_ms,
    attempt = attempt + 1,
    updated_at_ms = :now_ms
where id in (
    select id
    from cairnq_tasks
    where queue = :queue
      and status = 'queued'
      and name = :name
      and run_at_ms <= :now_ms
    order by priority desc, run_at_ms, id
    limit :limit
)
returning id, payload, result, error, metadata, progress, message, attempt,
    max_attempts, priority, run_at_ms, cancel_requested_at_ms, parent_id,
    root_id, correlation_id, created_at_ms, completed_at_ms
