-- cairnq: echo-row id name queue status='queued' payload result=null error=null
-- cairnq: echo-row metadata progress=null message=null attempt=0 max_attempts priority
-- cairnq: echo-row worker_id=null lease_until_ms=null run_at_ms cancel_requested_at_ms=null
-- cairnq: echo-row parent_id root_id correlation_id created_at_ms=:now_ms
-- cairnq: echo-row updated_at_ms=:now_ms completed_at_ms=null
-- Enqueue one task. Every column is written explicitly and times come from the
-- SDK clock at bind time, so the new row is exactly the bound values: the store
-- rebuilds it from them instead of asking for RETURNING, which costs SQLite
-- more than the insert itself when writes are batched (see bench/).
insert into cairnq_tasks (
    id, name, queue, status, payload, result, error, metadata,
    progress, message, attempt, max_attempts, priority, worker_id,
    lease_until_ms, run_at_ms, cancel_requested_at_ms, parent_id, root_id,
    correlation_id, created_at_ms, updated_at_ms, completed_at_ms
) values (
    :id, :name, :queue, 'queued', :payload, null, null, :metadata,
    null, null, 0, :max_attempts, :priority, null,
    null, :run_at_ms, null, :parent_id, :root_id,
    :correlation_id, :now_ms, :now_ms, null
)
