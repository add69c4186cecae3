-- PostgreSQL form of sqlite/0006_run_revisions.sql. Concurrent transactions commit in any
-- order, so a counter would let a reader skip a change that commits late. Each changed run is
-- stamped with its writer's transaction id instead; a reader remembers the oldest transaction
-- still running when it read (pg_snapshot_xmin) and next time reads every run stamped with that
-- id or a later one, which includes every change it has not seen.
ALTER TABLE runs ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION runs_stamp_revision() RETURNS trigger AS $$
BEGIN
    NEW.revision := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER runs_revised BEFORE INSERT OR UPDATE ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_stamp_revision();

CREATE INDEX runs_by_revision ON runs (revision);
