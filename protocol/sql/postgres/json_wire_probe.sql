-- How does this driver hand back jsonb: as text or decoded? Measured once per
-- connect; the answer applies to every row mapped afterwards.
select '"cairnq"'::jsonb as probe
