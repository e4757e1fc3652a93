-- claimable_probe for a caller that takes any task name: one seek per queue.
select exists (
           select 1
           from json_each(:queues) q
           where exists (
               select 1 from cairnq_tasks t
               where t.queue = q.value
                 and t.status = 'queued'
                 and +t.run_at_ms <= :now_ms
           )
       ) as due,
       exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= :now_ms
       ) as expired
