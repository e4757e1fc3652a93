-- Is a claim worth a transaction? True when a task of one of :queues and :names
-- is due, or when any lease anywhere has expired (not filtered: recovering a
-- dead worker's tasks is every claimer's job). Two EXISTS so each arm reaches
-- its own index; the clock is read once, in a sub-select, so it can bound the
-- index scans.
select exists (
           select 1
           from unnest(:queues::text[]) as q (queue)
           cross join unnest(:names::text[]) as n (name)
           where exists (
               select 1 from cairnq_tasks t
               where t.queue = q.queue
                 and t.status = 'queued'
                 and t.name = n.name
                 and t.run_at_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
           )
       )
    or exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as has_work
