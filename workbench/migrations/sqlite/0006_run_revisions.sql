-- Every insert or update of a run stamps it with a new store-wide revision, so a reader that
-- refreshes the runs table twice a second (the TUI) reads only the runs changed since its last
-- read instead of all of them. SQLite has one writer at a time, so revisions are handed out in
-- commit order: a reader that saw revision N has seen every change up to N.
ALTER TABLE runs ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;

CREATE TABLE run_revision (n INTEGER NOT NULL);
INSERT INTO run_revision (n) VALUES (0);

CREATE TRIGGER runs_revised_on_insert AFTER INSERT ON runs
BEGIN
    UPDATE run_revision SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM run_revision) WHERE id = NEW.id;
END;

-- The WHEN clause keeps the trigger's own stamp from firing it again.
CREATE TRIGGER runs_revised_on_update AFTER UPDATE ON runs WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE run_revision SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM run_revision) WHERE id = NEW.id;
END;

CREATE INDEX runs_by_revision ON runs (revision);
