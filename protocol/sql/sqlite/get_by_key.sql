select t.*
from cairnq_task_keys k
join cairnq_tasks t on t.id = k.task_id
where k.key = :key
