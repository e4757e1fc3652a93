select exists (select 1 from sqlite_stat1 where tbl = 'cairnq_tasks') as present
