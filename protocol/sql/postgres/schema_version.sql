-- The schema_version meta row (informational: no SDK refuses a newer one).
select value from cairnq_meta where key = 'schema_version'
