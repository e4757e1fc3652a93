-- Record a failed attempt with its error envelope. Decided on the row as it was:
--   cancel requested                          -> canceled
--   :retryable and attempts left              -> queued again after :delay_ms
--   otherwise                                 -> failed
-- Ownership-checked. :retryable is bound as 1/0.
update cairnq_tasks
set status = case
        when cancel_requested_at_ms is not null then 'canceled'
        when :retryable = 1 and attempt < max_attempts then 'queued'
        else 'failed'
    end,
    error = :error,
    worker_id = case
        when cancel_requested_at_ms is null and :retryable = 1 and attempt < max_attempts then null
        else worker_id
    end,
    lease_until_ms = null,
    run_at_ms = case
        when cancel_requested_at_ms is null and :retryable = 1 and attempt < max_attempts
            then :now_ms + :delay_ms
        else run_at_ms
    end,
    completed_at_ms = case
        when cancel_requested_at_ms is null and :retryable = 1 and attempt < max_attempts then null
        else :now_ms
    end,
    progress = case
        when cancel_requested_at_ms is null and :retryable = 1 and attempt < max_attempts then null
        else progress
    end,
    message = case
        when cancel_requested_at_ms is null and :retryable = 1 and attempt < max_attempts then null
        else message
    end,
    updated_at_ms = :now_ms
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > :now_ms
returning *
