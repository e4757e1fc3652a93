-- cairnq: plan-per-value status queue name id_above id_below
-- Dashboard: one page of tasks, newest created first. Ids are task_<ULID>
-- (OPERATIONS.md), so id order is creation order and the
-- primary key serves both the order and the creation-time range: the id
-- bounds (:id_above, :id_below: "task_" and a ULID time prefix a few minutes
-- wider than the range, or the floor and ceiling when unbounded) are the
-- index range, and created_at_ms the exact test (an SDK may stamp the id
-- and the row a millisecond apart). :after_id is the keyset cursor: the
-- last id the previous page showed (the ceiling on the first page).
select *
from cairnq_tasks
where id > :id_above
  and id < :id_below
  and created_at_ms >= :created_from_ms
  and created_at_ms < :created_to_ms
  and id < :after_id
  and (:status::text is null or status = :status)
  and (:queue::text is null or queue = :queue)
  and (:name::text is null or name = :name)
  and (:root_id::text is null or root_id = :root_id)
  and (:correlation_id::text is null or correlation_id = :correlation_id)
order by id desc
limit :limit
