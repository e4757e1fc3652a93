-- Load sqlite_stat1 into this connection's planner (after it was rewritten here).
analyze sqlite_master
