-- `usage_by_day` (the dashboard, `flynn usage`) reads the rows since a
-- date: without this index it scanned the whole table.
CREATE INDEX usage_by_time ON usage (created_at);
