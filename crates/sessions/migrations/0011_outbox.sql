-- The outbox: when a chat message's answer (or its failure, or the note
-- of its interruption) was handed to its channel, in Unix milliseconds.
-- A finished turn of a chat message with no time here was cut off by a
-- crash between storing its answer and sending it; the daemon sends it at
-- its next start. Turns stored before this column existed count as sent.
ALTER TABLE turns ADD COLUMN delivered_at INTEGER;
UPDATE turns SET delivered_at = updated_at;
CREATE INDEX turns_undelivered ON turns (updated_at)
    WHERE delivered_at IS NULL AND external_id IS NOT NULL;
