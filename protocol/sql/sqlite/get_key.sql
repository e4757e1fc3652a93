select task_id from cairnq_task_keys where key = :key
