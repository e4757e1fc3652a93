-- Newest first. Each optional filter is written "(:p is null or col = :p)";
-- the store rewrites it to the bare equality (or drops it) before running, so
-- a given filter can reach its index.
select *
from cairnq_tasks
where (:status is null or status = :status)
  and (:queue is null or queue = :queue)
  and (:name is null or name = :name)
  and (:root_id is null or root_id = :root_id)
  and (:correlation_id is null or correlation_id = :correlation_id)
order by created_at_ms desc, id desc
limit :limit offset :offset
