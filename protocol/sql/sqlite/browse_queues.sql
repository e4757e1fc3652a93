-- Dashboard overview: per queue and status, the count; for queued tasks also
-- how many are not due yet and the due time of the longest-waiting due one.
-- Reads only columns of cairnq_tasks_claim_idx (a covering scan, no table
-- lookups); the dashboard runs it at most once a second, and only while
-- someone watches.
select queue,
       status,
       count(*) as count,
       sum(case when status = 'queued' and run_at_ms > :now_ms then 1 else 0 end) as scheduled,
       min(case when status = 'queued' and run_at_ms <= :now_ms then run_at_ms end) as oldest_due_ms
from cairnq_tasks
group by queue, status
order by queue, status
