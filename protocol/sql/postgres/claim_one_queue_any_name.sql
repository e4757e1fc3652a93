-- Draw up to :limit due tasks of one queue, any name, in claim order: an
-- ordered scan of cairnq_tasks_claim_idx that stops after :limit due rows.
update cairnq_tasks t
set status = 'running',
    worker_id = :worker_id,
    lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + :lease_ms,
    attempt = t.attempt + 1,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
from (
    select id
    from cairnq_tasks
    where queue = :queue
      and status = 'queued'
      and run_at_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint
    order by priority desc, run_at_ms, id
    limit :limit
    for update skip locked
) as picked
where t.id = picked.id
returning t.*
