-- Extend every lease in :ids (JSON array) in one write. Ownership-checked per
-- row; an id missing from the result lost its lease. Returns only what a beat
-- needs (presence and the cancel flag), never the payloads.
-- The unary + keeps the planner off the status indexes: it must look each id
-- up by primary key, not walk every running row.
update cairnq_tasks
set lease_until_ms = :lease_until_ms,
    updated_at_ms = :now_ms
where id in (select value from json_each(:ids))
  and +status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > :now_ms
returning id, cancel_requested_at_ms
