-- Initial run-store schema. Never edit this file once released: sqlx stores its checksum in
-- `_sqlx_migrations` and refuses databases whose applied migrations differ. Add 0002_*.sql instead.

-- One row per training run. AUTOINCREMENT keeps ids of deleted runs from being reused, so
-- files named after a run id (checkpoints, plots) can never be mistaken for a newer run's.
CREATE TABLE runs (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    status            TEXT    NOT NULL
                      CHECK (status IN ('queued', 'running', 'finished', 'failed', 'interrupted', 'diverged')),
    layer_name        TEXT    NOT NULL,
    layer_version     TEXT    NOT NULL,
    layer_fingerprint TEXT    NOT NULL,
    layer_build       TEXT,            -- hash of the plugin sources, filled in later
    task_name         TEXT    NOT NULL,
    task_version      TEXT    NOT NULL,
    task_fingerprint  TEXT    NOT NULL,
    task_build        TEXT,
    config            TEXT    NOT NULL, -- JSON
    seed              INTEGER NOT NULL, -- u64 stored bit-for-bit as i64
    device            TEXT    NOT NULL,
    param_count       INTEGER,
    git_rev           TEXT,
    created_at        REAL    NOT NULL, -- unix seconds
    started_at        REAL,
    finished_at       REAL,
    error             TEXT,
    worker_pid        INTEGER,
    last_step         INTEGER NOT NULL DEFAULT 0,
    total_steps       INTEGER,
    notes             TEXT    NOT NULL DEFAULT '',
    tags              TEXT    NOT NULL DEFAULT ''  -- comma-separated
);

CREATE INDEX runs_status ON runs (status);

-- Scalar training/evaluation curves. value NULL stands for NaN (SQLite cannot store NaN).
CREATE TABLE metrics (
    run_id    INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step      INTEGER NOT NULL,
    split     TEXT    NOT NULL, -- 'train', 'eval', ...
    name      TEXT    NOT NULL,
    value     REAL,             -- NULL = NaN
    wall_time REAL              -- seconds since run start; NULL = NaN
);

CREATE INDEX metrics_run_name_step ON metrics (run_id, name, step);

-- Per-iteration quantities of the energy-minimising layer, recorded at evaluation steps.
CREATE TABLE diagnostics (
    run_id    INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step      INTEGER NOT NULL, -- training step of the evaluation
    iteration INTEGER NOT NULL, -- layer iteration t (0 = input)
    name      TEXT    NOT NULL,
    value     REAL              -- NULL = NaN
);

CREATE INDEX diagnostics_run_name_step_iter ON diagnostics (run_id, name, step, iteration);

-- Files produced by a run (checkpoints, plots, ...).
CREATE TABLE artifacts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL, -- 'checkpoint', 'plot', ...
    path       TEXT    NOT NULL,
    step       INTEGER,
    created_at REAL    NOT NULL
);

CREATE INDEX artifacts_run_kind_step ON artifacts (run_id, kind, step);

-- Worker log lines, in arrival order (id).
CREATE TABLE logs (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at     REAL    NOT NULL, -- unix seconds
    line   TEXT    NOT NULL
);

CREATE INDEX logs_run_id ON logs (run_id, id);
