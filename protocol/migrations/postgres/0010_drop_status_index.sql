-- Every status lookup is now served by a composite index; this one only cost
-- writes.
drop index if exists cairnq_tasks_status_idx;

update cairnq_meta set value = '10' where key = 'schema_version';
