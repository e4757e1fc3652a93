-- cairnq_tasks' row count, counted no further than :limit: whether the table
-- has outgrown the seeded statistics, at the cost of :limit index entries at most.
select count(*) as counted from (select 1 from cairnq_tasks limit :limit)
