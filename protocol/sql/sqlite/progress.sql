-- Report progress. A null leaves that field as it is. Ownership-checked.
update cairnq_tasks
set progress = coalesce(:progress, progress),
    message = coalesce(:message, message),
    updated_at_ms = :now_ms
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > :now_ms
returning *
