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
    run_at_ms = (extract(epoch from now()) * 1000)::bigint,
    attempt = case when :reset_attempt then 0 else attempt end,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = :id
  and status in ('failed', 'canceled')
returning *
