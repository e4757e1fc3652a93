-- Is a claim worth a write transaction? Read-only. "due": a task of one of
-- :queues and :names (JSON arrays) is due; "expired": a lease anywhere has
-- expired (recovering a dead worker's tasks is every claimer's job, so that arm
-- is filtered by neither queue nor name). Either one opens the transaction;
-- recover_leases runs in it only when "expired" said so.
--
-- One index seek per (queue, name) pair on cairnq_tasks_claim_name_idx, so a
-- name with nothing queued costs the same against an empty table and against a
-- deep backlog of other names. The unary + keeps run_at_ms out of the index
-- constraint, which otherwise tempts the planner into a skip-scan that ignores
-- the queue equality.
select exists (
           select 1
           from json_each(:queues) q
           cross join json_each(:names) n
           where exists (
               select 1 from cairnq_tasks t
               where t.queue = q.value
                 and t.status = 'queued'
                 and t.name = n.value
                 and +t.run_at_ms <= :now_ms
           )
       ) as due,
       exists (
           select 1 from cairnq_tasks
           where status = 'running'
             and lease_until_ms is not null
             and lease_until_ms <= :now_ms
       ) as expired
