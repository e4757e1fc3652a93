-- A queued task is canceled outright; a running one only gets the cooperative
-- flag, and finalizes as canceled when its worker settles it or its lease is
-- recovered ("cancel wins").
update cairnq_tasks
set status = case when status = 'queued' then 'canceled' else status end,
    cancel_requested_at_ms = case when status = 'running' then (extract(epoch from now()) * 1000)::bigint
                                  else cancel_requested_at_ms end,
    completed_at_ms = case when status = 'queued' then (extract(epoch from now()) * 1000)::bigint else completed_at_ms end,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
where id = :id
  and status in ('queued', 'running')
returning *
