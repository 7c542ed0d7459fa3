-- Gmail watches: their run records sit beside the cron jobs' (kind
-- 'gmail'), with where each stopped reading its mailbox (`cursor`).

ALTER TABLE automation_runs DROP CONSTRAINT automation_runs_kind_check;
ALTER TABLE automation_runs
    ADD CONSTRAINT automation_runs_kind_check CHECK (kind IN ('cron', 'heartbeat', 'gmail'));
ALTER TABLE automation_runs ADD COLUMN cursor TEXT;
