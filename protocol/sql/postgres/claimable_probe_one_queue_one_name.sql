-- cairnq: plan-per-value queue name
-- claimable_probe for the commonest caller: one queue, one name. Plain
-- equalities: the planner seeks an index on the name whether or not the
-- table has statistics yet (an array-valued filter is planned badly without).
select exists (
           select 1
           from cairnq_tasks
           where queue = :queue
             and status = 'queued'
             and name = :name
             and run_at_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as due,
       exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as expired
