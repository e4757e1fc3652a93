-- cairnq: fill-row status='running' worker_id lease_until_ms updated_at_ms=:now_ms name
-- Draw up to :limit due tasks of one name from several :queues (JSON array):
-- each queue contributes its best :limit candidates by a seek on
-- cairnq_tasks_claim_name_idx, and the merge keeps the overall best.
update cairnq_tasks
set status = 'running',
    worker_id = :worker_id,
    lease_until_ms = :lease_until_ms,
    attempt = attempt + 1,
    updated_at_ms = :now_ms
where id in (
    select t.id
    from json_each(:queues) q
    cross join cairnq_tasks t
    where t.id in (
        select c.id
        from cairnq_tasks c
        where c.queue = q.value
          and c.status = 'queued'
          and c.name = :name
          and c.run_at_ms <= :now_ms
        order by c.priority desc, c.run_at_ms, c.id
        limit :limit
    )
    order by t.priority desc, t.run_at_ms, t.id
    limit :limit
)
returning id, queue, payload, result, error, metadata, progress, message,
    attempt, max_attempts, priority, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, completed_at_ms
