-- Does the file have a sqlite_stat1 table (made by any ANALYZE) at all?
select exists (
    select 1 from sqlite_master where type = 'table' and name = 'sqlite_stat1'
) as present
