-- A worker leaves its fleet (its claim loop stopped while its store stays
-- open; cairnq/store/postgres/fleet.py): its fleet connection lets go of the
-- member's hold and, if it led, of the leader's lock, for the next turn.
select pg_advisory_unlock_shared(:fleet_key::integer, 0),
       case when :leader::boolean then pg_advisory_unlock(:fleet_key::integer, 1) end
