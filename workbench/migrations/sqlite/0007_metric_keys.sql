-- One row per run, split, metric and step (and per iteration for diagnostics): a batch written
-- again, when the commit of its first write was lost in transit, replaces its rows instead of
-- storing them twice. Twins a store holds already keep the later row (the one read back:
-- readers order equal steps by rowid), and the summaries of their runs are rebuilt. The same
-- SQL serves both engines (postgres/0007_metric_keys.sql links here).
CREATE TEMP TABLE twinned_runs AS
SELECT DISTINCT m.run_id FROM metrics m
WHERE EXISTS (SELECT 1 FROM metrics b WHERE b.run_id = m.run_id AND b.name = m.name AND b.step = m.step
              AND b.split = m.split AND b.rowid > m.rowid);

DELETE FROM metrics
WHERE EXISTS (SELECT 1 FROM metrics b WHERE b.run_id = metrics.run_id AND b.name = metrics.name
              AND b.step = metrics.step AND b.split = metrics.split AND b.rowid > metrics.rowid);

DELETE FROM metric_summaries WHERE run_id IN (SELECT run_id FROM twinned_runs);
INSERT INTO metric_summaries (run_id, split, name, lo, hi, last, last_step, wall)
SELECT run_id, split, name, MIN(value), MAX(value),
       (SELECT value FROM metrics l WHERE l.run_id = m.run_id AND l.split = m.split AND l.name = m.name
        ORDER BY l.step DESC, l.rowid DESC LIMIT 1),
       MAX(step), MAX(wall_time)
FROM metrics m WHERE run_id IN (SELECT run_id FROM twinned_runs) GROUP BY run_id, split, name;
DROP TABLE twinned_runs;

DROP INDEX metrics_run_name_step;
CREATE UNIQUE INDEX metrics_key ON metrics (run_id, name, step, split);

DELETE FROM diagnostics
WHERE EXISTS (SELECT 1 FROM diagnostics b WHERE b.run_id = diagnostics.run_id AND b.name = diagnostics.name
              AND b.step = diagnostics.step AND b.iteration = diagnostics.iteration
              AND b.rowid > diagnostics.rowid);
DROP INDEX diagnostics_run_name_step_iter;
CREATE UNIQUE INDEX diagnostics_key ON diagnostics (run_id, name, step, iteration);
