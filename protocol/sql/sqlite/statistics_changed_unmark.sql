-- See statistics_changed_mark: the view only ever lives inside one transaction.
drop view cairnq_statistics_changed
