-- The wait loop's probe: never reads the payload.
select id, status from cairnq_tasks where id = :id
