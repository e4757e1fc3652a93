-- Statistics of a production-sized cairnq_tasks, recorded while the real table
-- is too small to measure. ANALYZE of a handful of rows says "one row per
-- anything", and the planner then scans the table where it should seek: a
-- multi-name claim walked the whole table (every finished row) once per name
-- candidate, ~300 ms a claim at 20,000 rows, until the statistics were next
-- refreshed. With these, every statement gets the plan it has on a large table
-- (pinned by tests/store/test_query_plans.py) from its first run. Shape: a
-- million rows, ten queues, five statuses, a hundred names, a thousand leases
-- held; the sqlite_stat1 format is "rows avg-rows-per-prefix...".
-- The trailing word marks them as seeded (see statistics_rows); the planner
-- skips words it does not know.
insert into sqlite_stat1 (tbl, idx, stat) values
    ('cairnq_tasks', 'sqlite_autoindex_cairnq_tasks_1', '1000000 1 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_claim_idx', '1000000 100000 20000 10000 2 1 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_claim_name_idx', '1000000 100000 20000 2000 1000 2 1 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_name_idx', '1000000 10000 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_root_idx', '1000000 2 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_correlation_idx', '1000000 2 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_completed_idx', '1000000 2 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_lease_idx', '1000 1 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_status_completed_idx', '1000000 200000 2 cairnq_seeded'),
    ('cairnq_tasks', 'cairnq_tasks_queue_completed_idx', '900000 90000 2 cairnq_seeded')
