-- Dashboard: browse_oldest for one unfinished status (queued or running).
-- Unfinished tasks are usually few among a long finished history, so the
-- rows come from cairnq_tasks_status_completed_idx (its status prefix)
-- and are sorted, instead of walking the primary key past every finished
-- task. The unary plus keeps SQLite's planner off the primary key (it cannot
-- know how rare the status is); PostgreSQL's statistics tell it.
select *
from cairnq_tasks
where status = :status
  and +id > :id_above
  and +id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and +id > :after_id
  and (:queue is null or queue = :queue)
  and (:name is null or name = :name)
  and (:root_id is null or root_id = :root_id)
  and (:correlation_id is null or correlation_id = :correlation_id)
order by +id asc
limit :limit
