-- Drop the recorded statistics of cairnq_tasks before seeding them.
delete from sqlite_stat1 where tbl = 'cairnq_tasks'
