-- Dashboard overview: tasks finished per minute since :since_ms, by final
-- status (a range of cairnq_tasks_completed_idx). Minutes are epoch
-- milliseconds divided by 60,000.
select completed_at_ms / 60000 as minute, status, count(*) as count
from cairnq_tasks
where completed_at_ms >= :since_ms
  and status in ('succeeded', 'failed', 'canceled')
group by completed_at_ms / 60000, status
order by minute, status
