insert into cairnq_migrations (name, applied_at_ms) values (:name, (extract(epoch from now()) * 1000)::bigint)
