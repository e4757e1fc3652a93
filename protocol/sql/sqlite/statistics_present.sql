-- Has ANALYZE ever recorded statistics for cairnq_tasks?
select exists (
    select 1 from sqlite_master where type = 'table' and name = 'sqlite_stat1'
) as present
