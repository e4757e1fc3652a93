-- Finish as succeeded regardless of any cancel request. Ownership-checked.
-- worker_id stays for the audit trail.
update cairnq_tasks
set status = 'succeeded',
    result = :result::jsonb,
    progress = 1.0,
    message = coalesce(:message::text, message),
    lease_until_ms = null,
    completed_at_ms = (extract(epoch from now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > (extract(epoch from now()) * 1000)::bigint
returning *
