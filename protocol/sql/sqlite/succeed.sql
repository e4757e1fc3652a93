-- Finish as succeeded regardless of any cancel request. Ownership-checked.
-- worker_id stays for the audit trail.
update cairnq_tasks
set status = 'succeeded',
    result = :result,
    progress = 1.0,
    message = coalesce(:message, message),
    lease_until_ms = null,
    completed_at_ms = :now_ms,
    updated_at_ms = :now_ms
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > :now_ms
returning *
