-- PostgreSQL form of sqlite/0003_sweeps_and_queue.sql.
CREATE TABLE sweeps (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT NOT NULL,
    spec       TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

ALTER TABLE runs ADD COLUMN sweep_id BIGINT REFERENCES sweeps (id) ON DELETE SET NULL;
ALTER TABLE runs ADD COLUMN sweep_index BIGINT;
ALTER TABLE runs ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN claimed_by BIGINT;
ALTER TABLE runs ADD COLUMN claimed_at DOUBLE PRECISION;

CREATE INDEX runs_sweep ON runs (sweep_id, sweep_index);
