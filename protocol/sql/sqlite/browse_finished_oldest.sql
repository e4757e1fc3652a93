-- Dashboard: one page of finished tasks, earliest finished first
-- (browse_finished_newest in the other direction; the cursor starts at
-- -1 and the id floor).
select *
from cairnq_tasks
where status in ('succeeded', 'failed', 'canceled')
  and completed_at_ms >= :after_completed_ms
  and (completed_at_ms > :after_completed_ms or id > :after_id)
  and +id > :id_above
  and +id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and (:status is null or status = :status)
  and (:queue is null or queue = :queue)
  and (:name is null or name = :name)
  and (:root_id is null or root_id = :root_id)
  and (:correlation_id is null or correlation_id = :correlation_id)
order by completed_at_ms asc, id asc
limit :limit
