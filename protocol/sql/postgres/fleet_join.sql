-- An idle worker joins its fleet (the workers of one installation that claim
-- the same queues and task names; cairnq/store/postgres/fleet.py): a shared
-- advisory lock (:fleet_key, 0), held by its fleet connection for as long as
-- that session lives, so the fleet's size is the number of holders. Run once
-- per connection; a killed worker's session ends and its hold with it.
select pg_advisory_lock_shared(:fleet_key::integer, 0)
