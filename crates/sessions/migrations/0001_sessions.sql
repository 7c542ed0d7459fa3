-- Conversations and their messages. Timestamps are Unix milliseconds.
CREATE TABLE sessions (
    key        TEXT PRIMARY KEY NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    -- JSON array of flynn_protocol::ContentBlock
    content     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (session_key, seq)
);
