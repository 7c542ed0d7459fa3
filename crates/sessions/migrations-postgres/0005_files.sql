-- Files turns sent to their chats (media.send, voice.say), kept so
-- any node can send or serve them, and the outbox sends those a node
-- died before sending (`sent_at` NULL). Removed with their session, and
-- a week after they were sent.
CREATE TABLE files (
    id          TEXT COLLATE "C" PRIMARY KEY,
    session_key TEXT COLLATE "C" NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    turn_id     BIGINT,
    name        TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    caption     TEXT,
    size        BIGINT NOT NULL,
    data        BYTEA NOT NULL,
    created_at  BIGINT NOT NULL,
    sent_at     BIGINT
);

CREATE INDEX files_by_turn ON files (session_key, turn_id);
CREATE INDEX files_by_time ON files (created_at);
