-- How many rows of cairnq_tasks the recorded statistics describe (NULL: none).
-- Each stat starts with its index's row count; the largest is the table's
-- (partial indexes hold fewer). Run only once sqlite_stat1 exists.
select max(cast(stat as integer)) as recorded_rows
from sqlite_stat1
where tbl = 'cairnq_tasks'
