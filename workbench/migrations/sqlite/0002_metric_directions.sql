-- The task's metrics in its declared order (the first is the headline) with their direction,
-- as JSON: [{"name": "cell_acc", "higher_is_better": true}, ...]. Empty until a worker has
-- built the task.
ALTER TABLE runs ADD COLUMN metric_specs TEXT NOT NULL DEFAULT '[]';
