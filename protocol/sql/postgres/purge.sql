-- Delete finished tasks older than the cutoff, oldest first, at most :limit.
-- SKIP LOCKED: a row a concurrent retry is requeueing is left alone rather than
-- deleted from under it. Key rows go through the foreign-key cascade.
delete from cairnq_tasks
where id in (
    select id
    from cairnq_tasks
    where status in ('succeeded', 'failed', 'canceled')
      and (:status::text is null or status = :status)
      and (:queue::text is null or queue = :queue)
      and (:name::text is null or name = :name)
      and completed_at_ms is not null
      and completed_at_ms < (extract(epoch from now()) * 1000)::bigint - :older_than_ms
    order by completed_at_ms asc
    limit :limit
    for update skip locked
)
returning id
