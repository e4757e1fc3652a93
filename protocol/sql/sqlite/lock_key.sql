-- Keyed transactions serialize on BEGIN IMMEDIATE already; this read keeps the
-- statement vocabulary identical across dialects.
select 1 as locked
