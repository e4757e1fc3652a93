-- Taken first in every migration's transaction, applied or not, so processes
-- cold-starting together run each migration once, in turn.
lock table cairnq_migrations in exclusive mode
