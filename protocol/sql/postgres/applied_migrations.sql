-- The migration ledger, oldest name first.
select name, applied_at_ms from cairnq_migrations order by name
