-- Chat channels: the platform's id of an accepted message (a platform
-- delivering it again is answered once), senders approved by pairing,
-- and pairing codes waiting for the owner.

ALTER TABLE turns ADD COLUMN external_id TEXT;
CREATE UNIQUE INDEX turns_external ON turns (session_key, external_id)
    WHERE external_id IS NOT NULL;

CREATE TABLE channel_peers (
    channel     TEXT NOT NULL,
    sender      TEXT NOT NULL,
    name        TEXT,
    approved_at INTEGER NOT NULL,
    PRIMARY KEY (channel, sender)
);

CREATE TABLE pairing_codes (
    channel    TEXT NOT NULL,
    code       TEXT NOT NULL,
    sender     TEXT NOT NULL,
    name       TEXT,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (channel, code),
    UNIQUE (channel, sender)
);
