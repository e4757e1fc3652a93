-- cairnq: fill-row status='running' worker_id lease_until_ms updated_at_ms=:now_ms queue
-- Draw up to :limit due tasks of one queue whose name is in :names (a JSON
-- array of two or more). A name IN-list cannot be read in claim order from any
-- index, and as a residual on cairnq_tasks_claim_idx it walks the backlog of
-- every other name. Instead each name takes its own best :limit rows with a
-- seek on cairnq_tasks_claim_name_idx, and only those candidates are merged:
-- the winners overall are always among them.
update cairnq_tasks
set status = 'running',
    worker_id = :worker_id,
    lease_until_ms = :lease_until_ms,
    attempt = attempt + 1,
    updated_at_ms = :now_ms
where id in (
    select t.id
    from json_each(:names) n
    cross join cairnq_tasks t
    where t.id in (
        select c.id
        from cairnq_tasks c
        where c.queue = :queue
          and c.status = 'queued'
          and c.name = n.value
          and c.run_at_ms <= :now_ms
        order by c.priority desc, c.run_at_ms, c.id
        limit :limit
    )
    order by t.priority desc, t.run_at_ms, t.id
    limit :limit
)
returning id, name, payload, result, error, metadata, progress, message,
    attempt, max_attempts, priority, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, completed_at_ms
