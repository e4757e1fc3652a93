-- See statistics_changed_mark: the view only ever lives inside one transaction
-- (run before the mark too, in case anyone else left one of that name).
drop view if exists cairnq_statistics_changed
