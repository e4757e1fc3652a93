-- claimable_probe for a caller that takes any task name.
select exists (
           select 1
           from unnest(:queues::text[]) as q (queue)
           where exists (
               select 1 from cairnq_tasks t
               where t.queue = q.queue
                 and t.status = 'queued'
                 and t.run_at_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
           )
       )
    or exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as has_work
