-- What each model call was for: the conversation, or background work
-- delegated to a tier (compaction, memory extraction...). Calls recorded
-- before this column existed were all the conversation's.
ALTER TABLE usage ADD COLUMN purpose TEXT NOT NULL DEFAULT 'conversation';

-- Whole tool outputs kept when the model was shown a summary instead
-- (tools.summarise_over_bytes), readable again with `tool.output`.
CREATE TABLE tool_outputs (
    session_key TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    call_id     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    content     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (session_key, call_id)
);
