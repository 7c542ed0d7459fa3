-- Who sent each turn's message: 'owner', 'guest:<channel>:<id>' or
-- 'automation:<source>' (flynn_protocol::Principal). Turns stored before
-- principals existed were the owner's: NULL reads as 'owner'.
ALTER TABLE turns ADD COLUMN principal TEXT;

-- A paired sender the owner promoted to owner (`flynn pairing approve
-- --owner`): 1, else 0.
ALTER TABLE channel_peers ADD COLUMN owner INTEGER NOT NULL DEFAULT 0;
