-- Supervision by lease: where a run's worker runs and whether it is still alive, and how a
-- run ended when it ended abnormally.
ALTER TABLE runs ADD COLUMN host TEXT;          -- host name of the worker's machine
ALTER TABLE runs ADD COLUMN pid_start INTEGER;  -- the worker process's start time (clock ticks after boot), so a reused pid is not mistaken for it
ALTER TABLE runs ADD COLUMN heartbeat_at REAL;  -- unix seconds of the worker's last heartbeat
ALTER TABLE runs ADD COLUMN cause TEXT;         -- why a run ended abnormally: exit code, signal, scheduler state, expired lease
ALTER TABLE runs ADD COLUMN executor TEXT;      -- 'local' or 'slurm' (NULL: started before executors were recorded)
ALTER TABLE runs ADD COLUMN job_id TEXT;        -- the scheduler's job id (Slurm)
ALTER TABLE runs ADD COLUMN stop_requested REAL; -- unix seconds when a stop was asked for; the worker checkpoints and ends
ALTER TABLE runs ADD COLUMN claimed_host TEXT;  -- host of the queue runner holding the claim (its pid means nothing elsewhere)
