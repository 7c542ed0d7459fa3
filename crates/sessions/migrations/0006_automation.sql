-- Automation: the cron jobs agents created with `cron.add` (jobs from the
-- config file live in the file), and for every job and the heartbeat
-- since when its runs count and how its last run went, so that runs
-- missed while Flynn was down are known at the next start.

CREATE TABLE cron_jobs (
    name       TEXT PRIMARY KEY,
    schedule   TEXT NOT NULL,
    timezone   TEXT NOT NULL,
    message    TEXT NOT NULL,
    agent      TEXT,
    session    TEXT,
    deliver_to TEXT,
    missed     TEXT NOT NULL CHECK (missed IN ('skip', 'run_once')),
    enabled    INTEGER NOT NULL DEFAULT 1,
    -- The session whose turn created the job.
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE automation_runs (
    kind          TEXT NOT NULL CHECK (kind IN ('cron', 'heartbeat')),
    name          TEXT NOT NULL,
    -- Runs scheduled after this time (Unix ms) count: when the job was
    -- first scheduled.
    since         INTEGER NOT NULL,
    -- The last run, once there was one.
    scheduled_for INTEGER,
    started_at    INTEGER,
    finished_at   INTEGER,
    outcome       TEXT CHECK (outcome IN ('running', 'ok', 'failed', 'undelivered', 'interrupted')),
    error         TEXT,
    session_key   TEXT,
    turn_id       INTEGER,
    PRIMARY KEY (kind, name)
);
