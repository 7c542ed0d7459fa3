-- The session store on PostgreSQL: the schema the SQLite store reaches
-- through its migrations 0001 to 0011, in one step. Timestamps are Unix
-- milliseconds. Text that is sorted (keys and names) is COLLATE "C", so it
-- sorts by its bytes as SQLite's does, whatever the database's locale.

-- The high-water marks of message numbers and turn ids, which are never
-- reused (not after a reset, a compaction or a failed write: a number
-- taken here is given back when its transaction rolls back, which a
-- sequence's is not). Its one row is also the store's write lock: every
-- write that stamps, creates or deletes a session, or numbers a message or
-- a turn, locks it first and holds it to its commit, so numbers and
-- `sessions.updated_at` grow in the order of the commits, as under
-- SQLite's single writer.
CREATE TABLE store_counters (
    only_row  BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    last_seq  BIGINT NOT NULL,
    last_turn BIGINT NOT NULL
);
INSERT INTO store_counters (only_row, last_seq, last_turn) VALUES (true, 0, 0);

-- Conversations. `updated_at` is strictly increasing across changes (see
-- `touch`), so `list` shows the true order of changes.
CREATE TABLE sessions (
    key          TEXT COLLATE "C" PRIMARY KEY,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    agent        TEXT,
    tier         TEXT,
    model        TEXT,
    title        TEXT,
    last_channel TEXT,
    -- What brought untrusted content into the session, e.g.
    -- "web.fetch in turn 12"; NULL while the session holds none.
    taint        TEXT
);

-- `list` reads sessions newest first, and each write stamps its session
-- after the newest one.
CREATE INDEX sessions_by_update ON sessions (updated_at);

-- Messages: `seq` is unique across the store and never reused; `pos`
-- orders a session's history (an append has pos = seq; compaction puts new
-- numbers at old positions).
CREATE TABLE messages (
    seq         BIGINT PRIMARY KEY,
    session_key TEXT COLLATE "C" NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    pos         BIGINT NOT NULL,
    turn_id     BIGINT,
    role        TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    -- JSON array of flynn_protocol::ContentBlock
    content     TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    UNIQUE (session_key, pos)
);

-- One row per accepted inbound message. `content` is the message as
-- accepted; it joins the history (as message `message_seq`) when the
-- turn starts.
CREATE TABLE turns (
    id           BIGINT PRIMARY KEY,
    session_key  TEXT COLLATE "C" NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    status       TEXT NOT NULL CHECK (status IN
                     ('pending', 'running', 'completed', 'failed', 'cancelled', 'interrupted')),
    content      TEXT NOT NULL,
    agent        TEXT NOT NULL,
    owner_pid    BIGINT NOT NULL,
    message_seq  BIGINT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    -- The chat platform's id of the message: a platform delivering it
    -- again is answered once.
    external_id  TEXT,
    -- 'owner', 'guest:<channel>:<id>' or 'automation:<source>'; NULL reads
    -- as 'owner'.
    principal    TEXT,
    -- The outbox: when the turn's outcome was handed to its channel.
    delivered_at BIGINT
);

CREATE INDEX turns_open ON turns (status, session_key) WHERE status IN ('pending', 'running');
CREATE INDEX turns_by_session ON turns (session_key);
CREATE UNIQUE INDEX turns_external ON turns (session_key, external_id)
    WHERE external_id IS NOT NULL;
CREATE INDEX turns_undelivered ON turns (updated_at)
    WHERE delivered_at IS NULL AND external_id IS NOT NULL;

-- One row per model call: what it used and what it cost. Rows outlive a
-- session reset, so spending stays accountable.
CREATE TABLE usage (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_key        TEXT COLLATE "C" NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    tier               TEXT COLLATE "C" NOT NULL,
    -- What the call was for: the conversation, or delegated work.
    purpose            TEXT COLLATE "C" NOT NULL DEFAULT 'conversation',
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    -- USD; NULL when the model's price is unknown.
    cost_usd           DOUBLE PRECISION,
    created_at         BIGINT NOT NULL,
    -- The call was cut short; its tokens are what was known when it ended.
    partial            BOOLEAN NOT NULL DEFAULT false
);

CREATE INDEX usage_by_session ON usage (session_key);
CREATE INDEX usage_by_time ON usage (created_at);

-- Whole tool outputs kept when the model was shown a summary instead.
CREATE TABLE tool_outputs (
    session_key TEXT COLLATE "C" NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    call_id     TEXT COLLATE "C" NOT NULL,
    tool        TEXT NOT NULL,
    content     TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (session_key, call_id)
);

-- Senders approved by pairing, and pairing codes waiting for the owner.
CREATE TABLE channel_peers (
    channel     TEXT COLLATE "C" NOT NULL,
    sender      TEXT COLLATE "C" NOT NULL,
    name        TEXT,
    approved_at BIGINT NOT NULL,
    -- Promoted to owner (`flynn pairing approve --owner`).
    owner       BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (channel, sender)
);

CREATE TABLE pairing_codes (
    channel    TEXT COLLATE "C" NOT NULL,
    code       TEXT COLLATE "C" NOT NULL,
    sender     TEXT COLLATE "C" NOT NULL,
    name       TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (channel, code),
    UNIQUE (channel, sender)
);

-- Automation: the cron jobs agents created, and for every job and the
-- heartbeat since when its runs count and how its last run went.
CREATE TABLE cron_jobs (
    name       TEXT COLLATE "C" PRIMARY KEY,
    schedule   TEXT NOT NULL,
    timezone   TEXT NOT NULL,
    message    TEXT NOT NULL,
    agent      TEXT,
    session    TEXT,
    deliver_to TEXT,
    missed     TEXT NOT NULL CHECK (missed IN ('skip', 'run_once')),
    enabled    BOOLEAN NOT NULL DEFAULT true,
    -- The session whose turn created the job.
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE automation_runs (
    kind          TEXT COLLATE "C" NOT NULL CHECK (kind IN ('cron', 'heartbeat')),
    name          TEXT COLLATE "C" NOT NULL,
    -- Runs scheduled after this time count: when the job was first
    -- scheduled.
    since         BIGINT NOT NULL,
    -- The last run, once there was one.
    scheduled_for BIGINT,
    started_at    BIGINT,
    finished_at   BIGINT,
    outcome       TEXT CHECK (outcome IN ('running', 'ok', 'failed', 'undelivered', 'interrupted')),
    error         TEXT,
    session_key   TEXT,
    turn_id       BIGINT,
    PRIMARY KEY (kind, name)
);
