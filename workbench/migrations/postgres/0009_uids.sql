-- Every run and sweep carries an identity of its own, kept by `workbench db copy`, so that
-- copying a store into another again copies only what the target does not hold yet (ids
-- differ between stores; these do not). Rows from before get a random one here; new rows get
-- theirs from the workbench. SQLite's 0009 does the same with its own random function.
ALTER TABLE runs ADD COLUMN uid TEXT;
UPDATE runs SET uid = md5(random()::text || clock_timestamp()::text || id::text);
CREATE UNIQUE INDEX runs_uid ON runs (uid);

ALTER TABLE sweeps ADD COLUMN uid TEXT;
UPDATE sweeps SET uid = md5(random()::text || clock_timestamp()::text || id::text);
CREATE UNIQUE INDEX sweeps_uid ON sweeps (uid);
