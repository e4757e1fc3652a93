-- Purge scoped to one queue. Partial on the terminal statuses: purge repeats
-- this exact IN-list so SQLite can match the index predicate.
create index if not exists cairnq_tasks_queue_completed_idx
    on cairnq_tasks (queue, completed_at_ms)
    where status in ('succeeded', 'failed', 'canceled');

update cairnq_meta set value = '9' where key = 'schema_version';
