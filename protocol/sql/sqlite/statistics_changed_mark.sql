-- With statistics_changed_unmark, in the transaction that rewrote
-- sqlite_stat1: a schema change, so every other connection to the file (other
-- processes, other SDKs) reloads the statistics before its next statement and
-- replans. Rewriting sqlite_stat1 alone reaches only the connection that did it.
create view cairnq_statistics_changed as select 1 as changed
