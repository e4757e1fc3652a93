-- A queued task is canceled outright; a running one only gets the cooperative
-- flag, and finalizes as canceled when its worker settles it or its lease is
-- recovered ("cancel wins").
update cairnq_tasks
set status = case when status = 'queued' then 'canceled' else status end,
    cancel_requested_at_ms = case when status = 'running' then :now_ms
                                  else cancel_requested_at_ms end,
    completed_at_ms = case when status = 'queued' then :now_ms else completed_at_ms end,
    updated_at_ms = :now_ms
where id = :id
  and status in ('queued', 'running')
returning *
