-- Report progress. A null leaves that field as it is. Ownership-checked.
update cairnq_tasks
set progress = coalesce(:progress::double precision, progress),
    message = coalesce(:message::text, message),
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > (extract(epoch from now()) * 1000)::bigint
returning *
