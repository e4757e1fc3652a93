-- The schema this connection resolves to, beside every schema that already
-- holds a cairnq_tasks table. Always at least one row: the left join from a
-- one-row relation leaves schema null when there is no installation at all.
select current_schema()::text as current_schema,
       found.nspname::text as schema
from (select 1) as one
left join (
    select n.nspname
    from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    where c.relname = 'cairnq_tasks'
      and c.relkind = 'r'
) as found on true
order by found.nspname
