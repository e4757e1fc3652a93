-- Requeue a failed or canceled task now. The result survives; everything the
-- last run left behind (error, lease, cancel flag, progress) is cleared.
update cairnq_tasks
set status = 'queued',
    error = null,
    worker_id = null,
    lease_until_ms = null,
    cancel_requested_at_ms = null,
    completed_at_ms = null,
    progress = null,
    message = null,
    run_at_ms = :now_ms,
    attempt = case when :reset_attempt = 1 then 0 else attempt end,
    updated_at_ms = :now_ms
where id = :id
  and status in ('failed', 'canceled')
returning *
