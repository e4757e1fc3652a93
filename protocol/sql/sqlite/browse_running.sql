-- Dashboard overview: the running tasks, by worker, at most :limit.
select id, name, queue, worker_id, attempt, max_attempts, progress, message,
       lease_until_ms, updated_at_ms
from cairnq_tasks
where status = 'running'
order by worker_id, id
limit :limit
