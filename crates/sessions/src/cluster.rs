//! Several processes (nodes) sharing one database: who runs each
//! session's turns, who is alive, and the signals nodes send each other.
//!
//! A session's turns run on one node at a time: the node holding the
//! session's lease. Any node may accept a message (store it as a pending
//! turn); the holder runs it, in acceptance order. A node that stops
//! renewing its presence is dead after [`NODE_TTL`], and its leases may be
//! taken; the taker recovers the turns it left open as a restarted daemon
//! does. Only a store shared by several processes has a cluster (the
//! PostgreSQL one, [`PgStore::join_cluster`](crate::PgStore::join_cluster)); a
//! process on a SQLite file runs every session it has a lane for.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{SessionKey, TurnId};
use tokio::sync::broadcast;

use crate::Result;

/// How often a node renews its presence.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long a node may go without renewing its presence before the
/// others take it for dead and take over its sessions.
pub const NODE_TTL: Duration = Duration::from_secs(10);

/// A node's id: unique to one process's run (host, process id and a
/// random part), so a restarted process is a new node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub String);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What kind of process a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// `flynn-daemon` or `flynn start`.
    Daemon,
    /// A command that runs turns itself, such as `flynn send`.
    Command,
}

impl NodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Daemon => "daemon",
            NodeKind::Command => "command",
        }
    }
}

/// A node as the database knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub id: NodeId,
    pub host: String,
    pub pid: u32,
    /// `daemon` or `command` (see [`NodeKind`]).
    pub kind: String,
    /// Unix milliseconds, by the database's clock.
    pub started_at: i64,
    /// Milliseconds since the node last renewed its presence.
    pub silent_ms: i64,
    /// Whether it renewed its presence within [`NODE_TTL`].
    pub alive: bool,
    /// Sessions whose lease it holds.
    pub leases: u64,
    /// The roles it holds ([`Cluster::acquire_role`]), by name.
    pub roles: Vec<String>,
    /// It runs on this machine, in this process's process-id namespace:
    /// whether `pid` still runs can be checked here.
    pub local: bool,
}

/// Who holds a session's lease, as [`Cluster::acquire`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lease {
    /// This node: it runs the session's turns.
    Held,
    /// Another live node runs them.
    HeldBy(NodeId),
}

/// What one node tells the others.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// A message was accepted for the session on the sending node: `to`,
    /// the session's lease holder as the sender found it, should run it.
    Accepted { session: SessionKey, to: NodeId },
    /// The sending node gave the session's lease back: a node with turns
    /// waiting there may take it.
    Released { session: SessionKey },
    /// Cancel the session's running turn (`turn: None`), or this turn,
    /// running or waiting: a person asked on the sending node, and the
    /// turn runs on another.
    Cancel {
        session: SessionKey,
        turn: Option<TurnId>,
    },
    /// Empty the session (`/reset`): asked on the sending node, done by
    /// the session's lease holder.
    Reset { session: SessionKey },
    /// The session's settings (model, agent, trusted content) changed on
    /// the sending node: nodes with the session loaded read them again.
    Settings { session: SessionKey },
    /// Compact the session (`/compact`): asked on the sending node, done
    /// by the session's lease holder; `extract`: also extract facts into
    /// memory (the owner asked).
    Compact { session: SessionKey, extract: bool },
    /// An event of a turn (or a command) of the session on the sending
    /// node, as the runtime encodes it, for the session's followers on
    /// other nodes.
    Event { session: SessionKey, body: String },
}

/// A signal from another node.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub from: NodeId,
    pub signal: Signal,
}

/// What a node knows about the open turns of a session when it takes
/// the session over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOwner {
    /// This node accepted or ran it.
    This,
    /// A node that is alive.
    Alive,
    /// A node that is dead or gone, or none recorded (a process from
    /// before the cluster, or a store copied in).
    Gone,
}

/// The coordination of the nodes sharing a store.
#[async_trait]
pub trait Cluster: Send + Sync {
    /// This node.
    fn node(&self) -> &NodeId;

    /// Takes the session's lease, or keeps it: [`Lease::Held`] when this
    /// node holds it now (it was free, this node's, or its holder is
    /// dead), else who holds it.
    async fn acquire(&self, session: &SessionKey) -> Result<Lease>;

    /// Gives the session's lease back, if this node holds it, and tells
    /// the other nodes ([`Signal::Released`]).
    async fn release(&self, session: &SessionKey) -> Result<()>;

    /// Takes a role (work one node does for all, such as `automation` or
    /// `channel:telegram`), or keeps it: as [`acquire`](Self::acquire)
    /// does a session's lease.
    async fn acquire_role(&self, role: &str) -> Result<Lease>;

    /// Gives a role back, if this node holds it.
    async fn release_role(&self, role: &str) -> Result<()>;

    /// Sends a signal to every other node. Delivery is best-effort (a
    /// node whose connection to the database is down misses it): what a
    /// signal announces is in the store, and nodes check it there too.
    async fn signal(&self, signal: Signal) -> Result<()>;

    /// Sends several signals, in order, at the cost of one.
    async fn signal_all(&self, signals: Vec<Signal>) -> Result<()> {
        for signal in signals {
            self.signal(signal).await?;
        }
        Ok(())
    }

    /// The signals other nodes send, from now on. A receiver that falls
    /// behind loses the oldest.
    fn signals(&self) -> broadcast::Receiver<Received>;

    /// Who accepted or runs each open (pending or running) turn of the
    /// session, by turn.
    async fn turn_owners(&self, session: &SessionKey) -> Result<HashMap<TurnId, TurnOwner>>;

    /// Which of `turns` were run by a node that is dead or gone, or by
    /// none recorded: the turns whose unsent answers no live node sends.
    async fn turns_of_gone_nodes(&self, turns: &[TurnId]) -> Result<HashSet<TurnId>>;

    /// Sessions with open turns and no live lease holder: their holder
    /// died (or left) before it finished them, and any node may take them
    /// over.
    async fn orphaned_sessions(&self) -> Result<Vec<SessionKey>>;

    /// Whether this node is still counted alive: false once it went
    /// without renewing its presence for [`NODE_TTL`] (its leases may
    /// have been taken meanwhile), until it has renewed it again.
    fn is_alive(&self) -> bool;

    /// Every node the database knows, this one included, with how many
    /// leases each holds.
    async fn nodes(&self) -> Result<Vec<NodeInfo>>;

    /// Forgets another node (its lease, its presence) at once, without
    /// waiting [`NODE_TTL`]: for a node whose process is known to be gone
    /// (see [`NodeInfo::local`]).
    async fn forget(&self, node: &NodeId) -> Result<()>;

    /// Leaves the cluster: gives back every lease and removes this node,
    /// so the others take over at once instead of after [`NODE_TTL`].
    async fn leave(&self);
}
