-- A worker's log lines carry its writer's name and their number, so that a batch written again,
-- when the commit of its first write was lost in transit, stores none of its lines twice. Lines
-- written otherwise (an import, a starter's note) leave both empty: NULLs never clash in a
-- unique index. The same SQL serves both engines (postgres/0008_log_keys.sql links here).
ALTER TABLE logs ADD COLUMN writer TEXT;
ALTER TABLE logs ADD COLUMN seq BIGINT;
CREATE UNIQUE INDEX logs_key ON logs (run_id, writer, seq);
