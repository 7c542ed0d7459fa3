-- Several daemons (nodes) sharing this database. Times here are the
-- server's clock (`now()`), so nodes with drifting clocks agree on who is
-- alive.

-- Every process that runs turns on this database, while it runs. A node
-- renews `seen_at` every few seconds; one not seen for the lease time is
-- dead, and whatever it held may be taken.
CREATE TABLE cluster_nodes (
    id         TEXT COLLATE "C" PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        BIGINT NOT NULL,
    -- The machine's boot and the process-id namespace the pid belongs to:
    -- a process seeing the same key may check whether that pid still
    -- runs, and forget a node whose process is gone without waiting.
    local_key  TEXT NOT NULL,
    -- 'daemon', or 'cli' for a command such as `flynn send`.
    kind       TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Who runs each session's turns: the node holding its lease (while that
-- node lives). A node gives a lease back when the session's lane goes
-- idle and when it stops.
CREATE TABLE session_leases (
    session_key TEXT COLLATE "C" PRIMARY KEY,
    node        TEXT COLLATE "C" NOT NULL,
    taken_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX session_leases_node ON session_leases (node);

-- Work one node of the cluster does for all: `automation` (cron jobs and
-- the heartbeat), `channel:<name>` (a chat channel's connection). Held
-- like a session's lease.
CREATE TABLE cluster_roles (
    name     TEXT COLLATE "C" PRIMARY KEY,
    node     TEXT COLLATE "C" NOT NULL,
    taken_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The node that accepted a pending turn, then the one running it: a turn
-- whose node is dead was interrupted.
ALTER TABLE turns ADD COLUMN owner_node TEXT COLLATE "C";

-- Messages between nodes too long for a notification's payload, which
-- carries their id instead; dropped after a minute.
CREATE TABLE cluster_messages (
    id      BIGSERIAL PRIMARY KEY,
    body    TEXT NOT NULL,
    sent_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
