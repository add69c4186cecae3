-- The token of a run's latest Slurm submission, written before `sbatch` and carried by that
-- job's worker: a job of an earlier submission (an sbatch that reported a failure though Slurm
-- took the job) never starts the run before its latest job's id is recorded.
ALTER TABLE runs ADD COLUMN submission TEXT;
