-- Extend every lease in :ids in one write. Ownership-checked per row; an id
-- missing from the result lost its lease. Returns only what a beat needs
-- (presence and the cancel flag), never the payloads.
update cairnq_tasks
set lease_until_ms = (extract(epoch from now()) * 1000)::bigint + :lease_ms,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = any(:ids::text[])
  and status = 'running'
  and worker_id = :worker_id
  and lease_until_ms > (extract(epoch from now()) * 1000)::bigint
returning id, cancel_requested_at_ms
