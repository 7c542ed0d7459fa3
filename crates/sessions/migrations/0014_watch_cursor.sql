-- Gmail watches: their run records sit beside the cron jobs' (kind
-- 'gmail'), with where each stopped reading its mailbox (`cursor`, the
-- watch's own text). SQLite cannot change a CHECK, so the table is made
-- again and its rows copied.

CREATE TABLE automation_runs_next (
    kind          TEXT NOT NULL CHECK (kind IN ('cron', 'heartbeat', 'gmail')),
    name          TEXT NOT NULL,
    since         INTEGER NOT NULL,
    scheduled_for INTEGER,
    started_at    INTEGER,
    finished_at   INTEGER,
    outcome       TEXT CHECK (outcome IN ('running', 'ok', 'failed', 'undelivered', 'interrupted')),
    error         TEXT,
    session_key   TEXT,
    turn_id       INTEGER,
    cursor        TEXT,
    PRIMARY KEY (kind, name)
);

INSERT INTO automation_runs_next (kind, name, since, scheduled_for, started_at, finished_at,
        outcome, error, session_key, turn_id)
    SELECT kind, name, since, scheduled_for, started_at, finished_at, outcome, error,
        session_key, turn_id
    FROM automation_runs;

DROP TABLE automation_runs;

ALTER TABLE automation_runs_next RENAME TO automation_runs;
