-- A model call cut short (cancelled, timed out, or its stream broke): 1,
-- else 0. Its tokens are what was known when it ended: the input as
-- estimated before sending (or as the provider reported it), the output
-- as streamed so far. The provider may have billed more.
ALTER TABLE usage ADD COLUMN partial INTEGER NOT NULL DEFAULT 0;
