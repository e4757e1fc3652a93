-- Extend one lease. Ownership-checked: the row must still be running under this
-- worker with an unexpired lease; no row back means the lease is lost.
update cairnq_tasks
set lease_until_ms = (extract(epoch from now()) * 1000)::bigint + :lease_ms,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > (extract(epoch from now()) * 1000)::bigint
returning *
