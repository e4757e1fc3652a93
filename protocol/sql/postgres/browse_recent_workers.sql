-- Dashboard overview: the workers that finished tasks since :since_ms (the
-- worker id stays on a finished row), with how many and when last.
select worker_id, count(*) as finished, max(completed_at_ms) as last_seen_ms
from cairnq_tasks
where completed_at_ms >= :since_ms
  and status in ('succeeded', 'failed', 'canceled')
  and worker_id is not null
group by worker_id
order by worker_id
