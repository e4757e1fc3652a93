-- cairnq: plan-per-value queues names
-- Is a claim worth a transaction? "due": a task of one of :queues and :names is
-- due; "expired": a lease anywhere has expired (not filtered: recovering a dead
-- worker's tasks is every claimer's job). Either opens the transaction;
-- recover_leases runs in it only when "expired" said so. Two EXISTS so each arm
-- reaches its own index; the clock is read once, in a sub-select, so it can bound the
-- index scans. Planned per call with the actual arrays.
--
-- The queue and status tests are written as expressions on purpose: they
-- keep the planner on cairnq_tasks_name_idx, where the names are seeks. With
-- them as plain columns it may pick cairnq_tasks_claim_name_idx with the name
-- array as a mere filter, and walk the whole backlog of other names.
select exists (
           select 1
           from cairnq_tasks
           where name = any(:names::text[])
             and (queue || '') = any(:queues::text[])
             and (status || '') = 'queued'
             and run_at_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as due,
       exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= (select (extract(epoch from clock_timestamp()) * 1000)::bigint)
       ) as expired
