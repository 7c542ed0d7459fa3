-- Untrusted content (a web page, an MCP tool's output, a webhook body)
-- that entered a session, kept across turns until the owner clears it
-- (/trust) or the session is reset: what brought it in, e.g.
-- "web.fetch in turn 12". NULL while the session holds none.
ALTER TABLE sessions ADD COLUMN taint TEXT;
