-- Files turns sent to their chats (media.send, voice.say), kept so
-- any process sharing the store can send or serve them, and the next
-- start sends those a process died before sending (`sent_at` NULL).
-- Removed with their session, and a week after they were sent.
CREATE TABLE files (
    id          TEXT PRIMARY KEY,
    session_key TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    turn_id     INTEGER,
    name        TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    caption     TEXT,
    size        INTEGER NOT NULL,
    data        BLOB NOT NULL,
    created_at  INTEGER NOT NULL,
    sent_at     INTEGER
);

CREATE INDEX files_by_turn ON files (session_key, turn_id);
CREATE INDEX files_by_time ON files (created_at);
