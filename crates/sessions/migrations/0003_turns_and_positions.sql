-- Sequence numbers unique across the store and never reused, a position
-- that orders each session's history, turns as the durable inbox, and
-- per-session metadata. Existing rows keep their order: their old row ids
-- grew in history order, so they become both sequence and position.

ALTER TABLE sessions ADD COLUMN agent TEXT;
ALTER TABLE sessions ADD COLUMN tier TEXT;
ALTER TABLE sessions ADD COLUMN model TEXT;
ALTER TABLE sessions ADD COLUMN title TEXT;
ALTER TABLE sessions ADD COLUMN last_channel TEXT;

CREATE TABLE messages_v3 (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    pos         INTEGER NOT NULL,
    turn_id     INTEGER,
    role        TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    -- JSON array of flynn_protocol::ContentBlock
    content     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (session_key, pos)
);

INSERT INTO messages_v3 (seq, session_key, pos, turn_id, role, content, created_at)
    SELECT id, session_key, id, NULL, role, content, created_at FROM messages ORDER BY id;

-- Numbers are never reused: carry the old table's high-water mark over
-- (it may be above every remaining id when the newest messages were
-- deleted). Dropping the old table drops its sqlite_sequence row.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'messages_v3', 0
    WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'messages_v3');
UPDATE sqlite_sequence
    SET seq = MAX(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0))
    WHERE name = 'messages_v3';

DROP TABLE messages;
ALTER TABLE messages_v3 RENAME TO messages;

-- `list` reads sessions newest first, and each write stamps its session
-- after the newest one.
CREATE INDEX sessions_by_update ON sessions (updated_at);

-- One row per accepted inbound message. `content` is the message as
-- accepted; it joins the history (as message `message_seq`) when the
-- turn starts.
CREATE TABLE turns (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    status      TEXT NOT NULL CHECK (status IN
                    ('pending', 'running', 'completed', 'failed', 'cancelled', 'interrupted')),
    content     TEXT NOT NULL,
    agent       TEXT NOT NULL,
    owner_pid   INTEGER NOT NULL,
    message_seq INTEGER,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE INDEX turns_open ON turns (status, session_key) WHERE status IN ('pending', 'running');
CREATE INDEX turns_by_session ON turns (session_key);
