-- cairnq: plan-per-value queue name
-- Draw up to :limit due tasks of one queue and one name, in claim order
-- (priority desc, run_at_ms, id): an ordered scan of cairnq_tasks_claim_name_idx
-- that stops after :limit rows. SKIP LOCKED lets concurrent claimers take
-- disjoint rows without waiting for each other.
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
    select id
    from cairnq_tasks
    where queue = :queue
      and status = 'queued'
      and name = :name
      and run_at_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint
    order by queue, status, name, priority desc, run_at_ms, id
    limit :limit
    for update skip locked
))
returning t.*
