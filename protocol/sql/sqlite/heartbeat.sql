-- Extend one lease. Ownership-checked: the row must still be running under this
-- worker with an unexpired lease; no row back means the lease is lost.
update cairnq_tasks
set lease_until_ms = :lease_until_ms,
    updated_at_ms = :now_ms
where id = :id
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > :now_ms
returning *
