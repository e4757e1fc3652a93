-- The newest fire of every periodic schedule: the task whose metadata names
-- the schedule ("cairnq.periodic".schedule) with the latest fire_at (fixed-width
-- UTC text, so its text order is its time order). Reads every task: it serves
-- `cairnq schedules`, not a hot path.
select t.*
from cairnq_tasks t
join (
    select json_extract(metadata, '$."cairnq.periodic".schedule') as schedule,
           max(json_extract(metadata, '$."cairnq.periodic".fire_at')) as fire_at
    from cairnq_tasks
    where json_extract(metadata, '$."cairnq.periodic".schedule') is not null
    group by 1
) latest
  on json_extract(t.metadata, '$."cairnq.periodic".schedule') = latest.schedule
 and json_extract(t.metadata, '$."cairnq.periodic".fire_at') = latest.fire_at
order by latest.schedule, t.created_at_ms desc, t.id desc
