-- Measure cairnq_tasks for the planner, once it is large enough for the
-- measure to hold as it grows (see seed_statistics for before).
analyze cairnq_tasks
