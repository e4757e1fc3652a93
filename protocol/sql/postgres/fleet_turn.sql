-- A fleet member's turn (cairnq/store/postgres/fleet.py), on its fleet
-- connection: "leader": this session holds the fleet's probe lock
-- (:fleet_key, 1), taken now if free (never twice: a lock taken again would
-- need unlocking twice); "size": how many sessions have joined (hold
-- (:fleet_key, 0), see fleet_join). The leader probes every poll interval,
-- the others only now and then; a leader's session that ends frees the lock
-- for the next member's turn.
select case
           when exists (
               select 1 from pg_locks
               where pid = pg_backend_pid()
                 and locktype = 'advisory'
                 and classid = (:fleet_key::integer)::oid
                 and objid = 1
                 and objsubid = 2
                 and granted
           ) then true
           else pg_try_advisory_lock(:fleet_key::integer, 1)
       end as leader,
       (
           select count(*) from pg_locks
           where locktype = 'advisory'
             and database = (select oid from pg_database where datname = current_database())
             and classid = (:fleet_key::integer)::oid
             and objid = 0
             and objsubid = 2
             and granted
       ) as size
