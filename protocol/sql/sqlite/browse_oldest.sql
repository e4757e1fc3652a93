-- Dashboard: one page of tasks, oldest created first (browse_newest in the
-- other direction; :after_id is the floor on the first page).
select *
from cairnq_tasks
where id > :id_above
  and id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and id > :after_id
  and (:status is null or status = :status)
  and (:queue is null or queue = :queue)
  and (:name is null or name = :name)
  and (:root_id is null or root_id = :root_id)
  and (:correlation_id is null or correlation_id = :correlation_id)
order by id asc
limit :limit
