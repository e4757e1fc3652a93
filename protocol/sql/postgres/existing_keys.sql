-- Which of :keys name a task: each one looked up by primary key.
select key from cairnq_task_keys where key = any(:keys::text[])
