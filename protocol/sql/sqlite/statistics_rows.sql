-- How many rows of cairnq_tasks the recorded statistics describe (NULL: none),
-- and how many of its index statistics are recorded, and how many of those are
-- the seeded ones (each seeded stat ends with the word cairnq_seeded, which
-- SQLite's planner skips and ANALYZE never writes). Each stat starts with its
-- index's row count; the largest is the table's (partial indexes hold fewer).
-- Run only once sqlite_stat1 exists.
select max(cast(stat as integer)) as recorded_rows,
       count(*) as recorded_indexes,
       coalesce(sum(instr(stat, ' cairnq_seeded') > 0), 0) as seeded_indexes
from sqlite_stat1
where tbl = 'cairnq_tasks'
