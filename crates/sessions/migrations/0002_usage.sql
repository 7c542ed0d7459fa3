-- One row per model call: what it used and what it cost. Rows outlive a
-- session reset, so spending stays accountable.
CREATE TABLE usage (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    tier               TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    -- USD; NULL when the model's price is unknown.
    cost_usd           REAL,
    created_at         INTEGER NOT NULL
);

CREATE INDEX usage_by_session ON usage (session_key);
