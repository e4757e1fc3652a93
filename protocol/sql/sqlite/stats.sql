select queue, status, count(*) as count
from cairnq_tasks
where (:queue is null or queue = :queue)
group by queue, status
order by queue, status
