-- Dashboard: browse_finished_oldest for one final status: the status is the
-- equality that leads cairnq_tasks_status_completed_idx, whose order is then
-- the page's. (With the terminal IN-list beside it, PostgreSQL reads the
-- index for three values and sorts every match.)
select *
from cairnq_tasks
where status = :status
  and completed_at_ms >= :after_completed_ms
  and (completed_at_ms > :after_completed_ms or id > :after_id)
  and +id > :id_above
  and +id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and (:queue is null or queue = :queue)
  and (:name is null or name = :name)
  and (:root_id is null or root_id = :root_id)
  and (:correlation_id is null or correlation_id = :correlation_id)
order by completed_at_ms asc, id asc
limit :limit
