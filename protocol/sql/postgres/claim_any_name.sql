-- cairnq: plan-per-value queues
-- Draw up to :limit due tasks of any name from several :queues: each queue
-- contributes its best :limit candidates (LATERAL, an ordered scan of
-- cairnq_tasks_claim_idx) and the merge keeps the overall best.
--
-- The store plans this statement per call with its actual parameters (never
-- from a cached generic plan): which index is cheapest depends on how the
-- backlog is spread over names. The ORDER BY spells out the whole key of the
-- index that serves it (the leading columns are pinned by equalities, so it is
-- claim order), and the outer update looks the picked ids up by primary key.
update cairnq_tasks t
set status = 'running',
    worker_id = :worker_id,
    lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + :lease_ms,
    attempt = t.attempt + 1,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
where t.id = any(array(
    select c.id
    from unnest(:queues::text[]) as q (queue)
    cross join lateral (
        select id, priority, run_at_ms
        from cairnq_tasks
        where queue = q.queue
          and status = 'queued'
          and run_at_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint
        order by queue, status, priority desc, run_at_ms, id
        limit :limit
        for update skip locked
    ) as c
    order by c.priority desc, c.run_at_ms, c.id
    limit :limit
))
returning t.*
