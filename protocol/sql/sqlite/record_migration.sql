insert into cairnq_migrations (name, applied_at_ms) values (:name, :now_ms)
