-- Newest first. Each optional filter is written "(:p::text is null or col = :p)"
-- (the cast fixes the parameter's type); the store rewrites it to the bare
-- equality (or drops it) before running, so a given filter can reach its index.
select *
from cairnq_tasks
where (:status::text is null or status = :status)
  and (:queue::text is null or queue = :queue)
  and (:name::text is null or name = :name)
  and (:root_id::text is null or root_id = :root_id)
  and (:correlation_id::text is null or correlation_id = :correlation_id)
order by created_at_ms desc, id desc
limit :limit offset :offset
