-- Sweeps: a named grid of runs, in the order the sweep declared them.
CREATE TABLE sweeps (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,
    spec       TEXT NOT NULL, -- JSON: the command line's layers, task and axes
    created_at REAL NOT NULL
);

ALTER TABLE runs ADD COLUMN sweep_id INTEGER REFERENCES sweeps (id) ON DELETE SET NULL;
ALTER TABLE runs ADD COLUMN sweep_index INTEGER;
-- A held (paused) queued run is not started by the queue.
ALTER TABLE runs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
-- The queue runner (process id) that is starting a queued run, and when it claimed it; a
-- claim of a dead runner, or one that never became `running`, expires.
ALTER TABLE runs ADD COLUMN claimed_by INTEGER;
ALTER TABLE runs ADD COLUMN claimed_at REAL;

CREATE INDEX runs_sweep ON runs (sweep_id, sweep_index);
