-- Which of :keys (JSON array) name a task: each one looked up by primary key.
select key from cairnq_task_keys where key in (select value from json_each(:keys))
