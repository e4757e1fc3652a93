-- Draw up to :limit due tasks of one name from several :queues: each queue
-- contributes its best :limit candidates (LATERAL ordered scan of
-- cairnq_tasks_claim_name_idx) and the merge keeps the overall best.
update cairnq_tasks t
set status = 'running',
    worker_id = :worker_id,
    lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + :lease_ms,
    attempt = t.attempt + 1,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
from (
    select c.id
    from unnest(:queues::text[]) as q (queue)
    cross join lateral (
        select id, priority, run_at_ms
        from cairnq_tasks
        where queue = q.queue
          and status = 'queued'
          and name = :name
          and run_at_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint
        order by priority desc, run_at_ms, id
        limit :limit
        for update skip locked
    ) as c
    order by c.priority desc, c.run_at_ms, c.id
    limit :limit
) as picked
where t.id = picked.id
returning t.*
