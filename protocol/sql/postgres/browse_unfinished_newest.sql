-- cairnq: plan-per-value status queue name id_above id_below
-- Dashboard: browse_newest for one unfinished status (queued or running):
-- the same page, written with the status as a plain term
-- so the planner can read it from
-- cairnq_tasks_status_completed_idx when they are rare (SQLite's file
-- says why its text differs).
select *
from cairnq_tasks
where status = :status
  and id > :id_above
  and id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and id < :after_id
  and (:queue::text is null or queue = :queue)
  and (:name::text is null or name = :name)
  and (:root_id::text is null or root_id = :root_id)
  and (:correlation_id::text is null or correlation_id = :correlation_id)
order by id desc
limit :limit
