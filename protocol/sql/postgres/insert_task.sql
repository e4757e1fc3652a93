-- Enqueue one task. Times come from the database clock (wall clock at
-- evaluation, so a submit that waited on a lock is not stamped in the past).
insert into cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
) values (
    :id, :name, :queue, 'queued', :payload::jsonb, :metadata::jsonb, :max_attempts, :priority,
    (extract(epoch from clock_timestamp()) * 1000)::bigint + :delay_ms, :parent_id, :root_id, :correlation_id,
    (extract(epoch from clock_timestamp()) * 1000)::bigint, (extract(epoch from clock_timestamp()) * 1000)::bigint
)
returning *
