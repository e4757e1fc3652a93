-- The file's change counter as this connection sees it: it moves whenever
-- another connection commits. Read from the WAL index in shared memory, no
-- table is touched, so polling it is how an idle SQLite waiter notices other
-- processes' writes within milliseconds.
pragma data_version
