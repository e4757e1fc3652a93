-- Delete finished tasks older than the cutoff, oldest first, at most :limit.
-- The literal terminal IN-list matches cairnq_tasks_queue_completed_idx's
-- predicate. Key rows go with their task through the foreign-key cascade.
delete from cairnq_tasks
where id in (
    select id
    from cairnq_tasks
    where status in ('succeeded', 'failed', 'canceled')
      and (:status is null or status = :status)
      and (:queue is null or queue = :queue)
      and (:name is null or name = :name)
      and completed_at_ms is not null
      and completed_at_ms < :before_ms
    order by completed_at_ms asc
    limit :limit
)
returning id
