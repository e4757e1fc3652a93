-- The newest fire of every periodic schedule: the task whose metadata names
-- the schedule ("cairnq.periodic".schedule) with the latest fire_at (fixed-width
-- UTC text, so its text order is its time order). Reads every task: it serves
-- `cairnq schedules`, not a hot path.
select distinct on (metadata -> 'cairnq.periodic' ->> 'schedule') *
from cairnq_tasks
where metadata -> 'cairnq.periodic' ->> 'schedule' is not null
order by metadata -> 'cairnq.periodic' ->> 'schedule',
         metadata -> 'cairnq.periodic' ->> 'fire_at' desc,
         created_at_ms desc, id desc
