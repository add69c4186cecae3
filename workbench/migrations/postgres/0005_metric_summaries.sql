-- PostgreSQL form of sqlite/0005_metric_summaries.sql.
CREATE TABLE metric_summaries (
    run_id    BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    split     TEXT   NOT NULL,
    name      TEXT   NOT NULL,
    lo        DOUBLE PRECISION,
    hi        DOUBLE PRECISION,
    last      DOUBLE PRECISION,
    last_step BIGINT NOT NULL,
    wall      DOUBLE PRECISION,
    PRIMARY KEY (run_id, split, name)
);

INSERT INTO metric_summaries (run_id, split, name, lo, hi, last, last_step, wall)
SELECT run_id, split, name, MIN(value), MAX(value),
       (SELECT value FROM metrics l WHERE l.run_id = m.run_id AND l.split = m.split AND l.name = m.name
        ORDER BY l.step DESC, l.rowid DESC LIMIT 1),
       MAX(step), MAX(wall_time)
FROM metrics m GROUP BY run_id, split, name;
