-- Settle every task whose lease ran out. First statement of each claim
-- transaction. Decided on the row as it was:
--   cancel requested          -> canceled
--   attempts left             -> queued again, due now
--   attempts exhausted        -> failed with the lease-expired envelope
-- Rows are picked under FOR UPDATE SKIP LOCKED, so a lease renewed by a commit
-- that raced us is re-checked and left alone, and two claimers never fight.
update cairnq_tasks t
set status = case
        when t.cancel_requested_at_ms is not null then 'canceled'
        when t.attempt < t.max_attempts then 'queued'
        else 'failed'
    end,
    worker_id = case
        when t.cancel_requested_at_ms is null and t.attempt < t.max_attempts then null
        else t.worker_id
    end,
    lease_until_ms = null,
    run_at_ms = case
        when t.cancel_requested_at_ms is null and t.attempt < t.max_attempts then (extract(epoch from clock_timestamp()) * 1000)::bigint
        else t.run_at_ms
    end,
    error = case
        when t.cancel_requested_at_ms is null and t.attempt >= t.max_attempts
            then :lease_expired_error::jsonb
        else t.error
    end,
    completed_at_ms = case
        when t.cancel_requested_at_ms is null and t.attempt < t.max_attempts then t.completed_at_ms
        else (extract(epoch from clock_timestamp()) * 1000)::bigint
    end,
    progress = case
        when t.cancel_requested_at_ms is null and t.attempt < t.max_attempts then null
        else t.progress
    end,
    message = case
        when t.cancel_requested_at_ms is null and t.attempt < t.max_attempts then null
        else t.message
    end,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
from (
    select id
    from cairnq_tasks
    where status = 'running'
      and lease_until_ms is not null
      and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
    for update skip locked
) as expired
where t.id = expired.id
returning t.*
