-- claimable_probe for the commonest caller: one queue, one name. Plain
-- equalities: one seek on cairnq_tasks_claim_name_idx.
select exists (
           select 1 from cairnq_tasks
           where queue = :queue
             and status = 'queued'
             and name = :name
             and +run_at_ms <= :now_ms
       ) as due,
       exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= :now_ms
       ) as expired
