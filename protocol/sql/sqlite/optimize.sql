-- Refresh planner statistics where SQLite judges them stale.
pragma optimize
