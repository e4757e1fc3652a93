-- complete for many tasks of one worker, each with its own result (a drain
-- of handlers returning different values settles in one statement per poll
-- instead of one per task). :ids and :results are arrays of the same length,
-- paired by position; each result is the JSON text to store, or null. The ids
-- are distinct (the worker never repeats one in a batch). Per row exactly
-- complete.sql: ownership-checked, cancel wins. Returns the rows it settled;
-- an id missing lost its lease.
--
-- Reached by id, never through the lease index: that index also holds every
-- task claimed within a lease's time and settled since (dead entries a bitmap
-- scan never clears), so a plan through it walks them all, every worker's, and
-- slows as a drain goes on. The ownership check is one expression no index
-- answers, which leaves the primary key (or, for a tiny table, a scan), and the
-- statement is planned for each batch: a generic plan made while the table was
-- tiny would keep scanning it as it grows.
-- cairnq: plan-custom ids
update cairnq_tasks t
set status = case when t.cancel_requested_at_ms is null then 'succeeded' else 'canceled' end,
    result = case when t.cancel_requested_at_ms is null then s.result::jsonb else t.result end,
    progress = case when t.cancel_requested_at_ms is null then 1.0 else t.progress end,
    lease_until_ms = null,
    completed_at_ms = (extract(epoch from now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
from unnest(:ids::text[], :results::text[]) as s (id, result)
where t.id = any(:ids::text[])
  and t.id = s.id
  and coalesce(
        t.status = 'running'
        and t.worker_id = :worker_id
        and t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint,
        false)
returning t.id, t.status
