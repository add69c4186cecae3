-- PostgreSQL form of sqlite/0002_metric_directions.sql.
ALTER TABLE runs ADD COLUMN metric_specs TEXT NOT NULL DEFAULT '[]';
