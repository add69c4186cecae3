-- Per run and metric (split, name): the smallest, largest and last value, the last step and the
-- latest wall time, kept up to date as metrics are written, so the runs table reads one row per
-- metric instead of scanning every metric row (millions on a busy store).
CREATE TABLE metric_summaries (
    run_id    INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    split     TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    lo        REAL,             -- NULL: no finite value yet
    hi        REAL,
    last      REAL,             -- value at last_step (the latest written among equal steps); NULL = NaN
    last_step INTEGER NOT NULL,
    wall      REAL,
    PRIMARY KEY (run_id, split, name)
);

INSERT INTO metric_summaries (run_id, split, name, lo, hi, last, last_step, wall)
SELECT run_id, split, name, MIN(value), MAX(value),
       (SELECT value FROM metrics l WHERE l.run_id = m.run_id AND l.split = m.split AND l.name = m.name
        ORDER BY l.step DESC, l.rowid DESC LIMIT 1),
       MAX(step), MAX(wall_time)
FROM metrics m GROUP BY run_id, split, name;
