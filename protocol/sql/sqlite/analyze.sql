-- Bootstrap planner statistics: several claim and heartbeat plans depend on them.
analyze cairnq_tasks
