-- Headroom below :max_depth, reading at most :max_depth queued rows of the
-- queue (delayed ones included). Never negative.
select :max_depth::bigint - count(*) as headroom
from (
    select 1
    from cairnq_tasks
    where queue = :queue
      and status = 'queued'
    limit :max_depth
) as queued
