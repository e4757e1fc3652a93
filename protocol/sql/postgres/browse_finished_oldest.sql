-- cairnq: plan-per-value status queue name id_above id_below after_completed_ms after_id
-- (The cursor is written in as literals too: each page is planned for its
-- own position; a generic plan guesses a range's size and sorts.)
-- Dashboard: one page of finished tasks, earliest finished first
-- (browse_finished_newest in the other direction; the cursor starts at
-- -1 and the id floor).
select *
from cairnq_tasks
where status in ('succeeded', 'failed', 'canceled')
  and completed_at_ms >= :after_completed_ms
  and (completed_at_ms > :after_completed_ms or id > :after_id)
  and id > :id_above
  and id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and (:status::text is null or status = :status)
  and (:queue::text is null or queue = :queue)
  and (:name::text is null or name = :name)
  and (:root_id::text is null or root_id = :root_id)
  and (:correlation_id::text is null or correlation_id = :correlation_id)
order by completed_at_ms asc, id asc
limit :limit
