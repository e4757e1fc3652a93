-- cairnq: plan-per-value queues
-- claimable_probe for a caller that takes any task name (planned per call, as
-- claimable_probe).
select exists (
           select 1
           from cairnq_tasks
           where queue = any(:queues::text[])
             and status = 'queued'
             and run_at_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as due,
       exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as expired
