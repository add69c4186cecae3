-- Initial run-store schema, PostgreSQL form of sqlite/0001_init.sql (same tables, columns and
-- meanings; see that file). Never edit once released: add a migration instead, with the same
-- version number as its SQLite twin.
--
-- Differences from SQLite: BIGSERIAL ids (never reused, like AUTOINCREMENT), BIGINT and
-- DOUBLE PRECISION for SQLite's INTEGER and REAL, and an explicit `rowid` (insertion order) on
-- metrics and diagnostics, which SQLite gives every table implicitly, so queries that order by
-- insertion read the same on both backends.

CREATE TABLE runs (
    id                BIGSERIAL PRIMARY KEY,
    status            TEXT    NOT NULL
                      CHECK (status IN ('queued', 'running', 'finished', 'failed', 'interrupted', 'diverged')),
    layer_name        TEXT    NOT NULL,
    layer_version     TEXT    NOT NULL,
    layer_fingerprint TEXT    NOT NULL,
    layer_build       TEXT,
    task_name         TEXT    NOT NULL,
    task_version      TEXT    NOT NULL,
    task_fingerprint  TEXT    NOT NULL,
    task_build        TEXT,
    config            TEXT    NOT NULL,
    seed              BIGINT  NOT NULL,
    device            TEXT    NOT NULL,
    param_count       BIGINT,
    git_rev           TEXT,
    created_at        DOUBLE PRECISION NOT NULL,
    started_at        DOUBLE PRECISION,
    finished_at       DOUBLE PRECISION,
    error             TEXT,
    worker_pid        BIGINT,
    last_step         BIGINT  NOT NULL DEFAULT 0,
    total_steps       BIGINT,
    notes             TEXT    NOT NULL DEFAULT '',
    tags              TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX runs_status ON runs (status);

CREATE TABLE metrics (
    rowid     BIGSERIAL PRIMARY KEY,
    run_id    BIGINT  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step      BIGINT  NOT NULL,
    split     TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    value     DOUBLE PRECISION,
    wall_time DOUBLE PRECISION
);

CREATE INDEX metrics_run_name_step ON metrics (run_id, name, step);

CREATE TABLE diagnostics (
    rowid     BIGSERIAL PRIMARY KEY,
    run_id    BIGINT  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step      BIGINT  NOT NULL,
    iteration BIGINT  NOT NULL,
    name      TEXT    NOT NULL,
    value     DOUBLE PRECISION
);

CREATE INDEX diagnostics_run_name_step_iter ON diagnostics (run_id, name, step, iteration);

CREATE TABLE artifacts (
    id         BIGSERIAL PRIMARY KEY,
    run_id     BIGINT  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    step       BIGINT,
    created_at DOUBLE PRECISION NOT NULL
);

CREATE INDEX artifacts_run_kind_step ON artifacts (run_id, kind, step);

CREATE TABLE logs (
    id     BIGSERIAL PRIMARY KEY,
    run_id BIGINT  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at     DOUBLE PRECISION NOT NULL,
    line   TEXT    NOT NULL
);

CREATE INDEX logs_run_id ON logs (run_id, id);
