select 1 as applied from cairnq_migrations where name = :name
