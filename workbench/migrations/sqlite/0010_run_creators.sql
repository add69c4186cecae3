-- Who created each run (the login name of the user whose command stored it), so that a store
-- a lab shares tells its researchers' runs apart. Rows from before have none.
ALTER TABLE runs ADD COLUMN created_by TEXT;
