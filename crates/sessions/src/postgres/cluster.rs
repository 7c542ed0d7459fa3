//! The cluster of processes sharing a PostgreSQL store (see
//! [`crate::cluster`]): presence rows renewed by a heartbeat, lease rows,
//! and signals as `NOTIFY` on one channel.
//!
//! Every time is the server's (`now()`), so nodes whose clocks drift still
//! agree on who is alive. A signal's payload is JSON
//! (`{"from", "kind", "session", "body"}`); one too long for a
//! notification (PostgreSQL takes under 8,000 bytes) is stored in
//! `cluster_messages` and the notification carries its id (`"ref"`).

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{SessionKey, TurnId};
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::rows::to_u64;
use crate::cluster::{
    Cluster, HEARTBEAT, Lease, NODE_TTL, NodeId, NodeInfo, NodeKind, Received, Signal, TurnOwner,
};
use crate::codec::to_i64;
use crate::{Error, Result};

/// The notification channel every node listens on.
const CHANNEL: &str = "flynn_cluster";
/// The longest payload sent in the notification itself.
const INLINE_PAYLOAD: usize = 7_000;
/// Signals a receiver may fall behind by before it loses the oldest.
const SIGNAL_CAPACITY: usize = 4_096;
/// How long a node that stopped is remembered (shown by `flynn doctor`)
/// before its row goes.
const FORGET_AFTER: Duration = Duration::from_secs(3_600);
/// How long a long signal stays stored for the nodes to read it.
const MESSAGE_KEPT: Duration = Duration::from_secs(60);

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A process's membership of the cluster on a PostgreSQL store.
pub struct PgCluster {
    pool: PgPool,
    node: NodeId,
    alive: Arc<AtomicBool>,
    signals: broadcast::Sender<Received>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for PgCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCluster")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// What [`PgCluster::take`] takes.
#[derive(Debug, Clone, Copy)]
enum Held {
    Session,
    Role,
}

impl Held {
    fn what(self) -> &'static str {
        match self {
            Held::Session => "the lease of session",
            Held::Role => "the role",
        }
    }
}

/// A new node's id: the host, the process and a random part.
fn new_node_id() -> Result<NodeId> {
    let host = host_name();
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).map_err(|e| Error::Backend {
        message: format!("no random bytes for the node's id: {e}"),
    })?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(NodeId(format!("{host}/{}/{suffix}", std::process::id())))
}

/// The machine's boot and this process's process-id namespace: the same
/// for every process that sees the same process ids.
fn local_key() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default();
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .map(|link| link.display().to_string())
        .unwrap_or_default();
    if boot.is_empty() || namespace.is_empty() {
        // Unknown: never matches, so no process is judged by its pid.
        return String::new();
    }
    format!("{boot}/{namespace}")
}

/// This machine's name, as the kernel has it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl PgCluster {
    /// Registers this process as a node and starts its heartbeat and its
    /// listener.
    pub(super) async fn join(pool: PgPool, kind: NodeKind) -> Result<PgCluster> {
        let node = new_node_id()?;
        register(&pool, &node, kind).await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        let alive = Arc::new(AtomicBool::new(true));
        let (signals, _) = broadcast::channel(SIGNAL_CAPACITY);
        let heartbeat = tokio::spawn(beat(pool.clone(), node.clone(), kind, alive.clone()));
        let listen = tokio::spawn(listen(
            listener,
            pool.clone(),
            node.clone(),
            signals.clone(),
        ));
        Ok(PgCluster {
            pool,
            node,
            alive,
            signals,
            tasks: Mutex::new(vec![heartbeat, listen]),
        })
    }

    /// Stops the heartbeat and the listener (as a frozen process would).
    pub(super) fn stop_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            task.abort();
        }
    }

    /// Takes (or keeps) a session's lease or a role: the row is taken
    /// when it is free, already this node's, or its node is dead.
    async fn take(&self, held: Held, key: &str) -> Result<Lease> {
        let (table, column) = match held {
            Held::Session => ("session_leases", "session_key"),
            Held::Role => ("cluster_roles", "name"),
        };
        let take = format!(
            "INSERT INTO {table} ({column}, node) VALUES ($1, $2)
             ON CONFLICT ({column}) DO UPDATE SET node = excluded.node, taken_at = now()
             WHERE {table}.node = excluded.node
                OR NOT EXISTS (SELECT 1 FROM cluster_nodes n
                    WHERE n.id = {table}.node
                      AND n.seen_at > now() - ($3::BIGINT * INTERVAL '1 millisecond'))
             RETURNING node"
        );
        let holder = format!("SELECT node FROM {table} WHERE {column} = $1");
        for _ in 0..3 {
            let taken: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(take.clone()))
                .bind(key)
                .bind(&self.node.0)
                .bind(millis(NODE_TTL))
                .fetch_optional(&self.pool)
                .await?;
            if taken.is_some() {
                return Ok(Lease::Held);
            }
            let holder: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(holder.clone()))
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
            // Given back in between: try again.
            if let Some(holder) = holder {
                return Ok(Lease::HeldBy(NodeId(holder)));
            }
        }
        Err(Error::Busy {
            message: format!("{} '{key}' kept changing hands", held.what()),
        })
    }

    /// The payload of one signal: inline, or stored with its id inline.
    async fn payload(&self, signal: &Signal) -> Result<String> {
        let (kind, session, body, to, turn) = match signal {
            Signal::Accepted { session, to } => {
                ("accepted", session, None, Some(to.0.as_str()), None)
            }
            Signal::Released { session } => ("released", session, None, None, None),
            Signal::Cancel { session, turn } => ("cancel", session, None, None, turn.map(|t| t.0)),
            Signal::Reset { session } => ("reset", session, None, None, None),
            Signal::Settings { session } => ("settings", session, None, None, None),
            Signal::Compact { session, extract } => (
                "compact",
                session,
                Some(if *extract { "extract" } else { "" }),
                None,
                None,
            ),
            Signal::Event { session, body } => ("event", session, Some(body.as_str()), None, None),
        };
        let full = json!({
            "from": self.node.0,
            "kind": kind,
            "session": session.as_str(),
            "body": body,
            "to": to,
            "turn": turn,
        })
        .to_string();
        if full.len() <= INLINE_PAYLOAD {
            return Ok(full);
        }
        let id: i64 =
            sqlx::query_scalar("INSERT INTO cluster_messages (body) VALUES ($1) RETURNING id")
                .bind(&full)
                .fetch_one(&self.pool)
                .await?;
        Ok(json!({ "from": self.node.0, "ref": id }).to_string())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

async fn register(pool: &PgPool, node: &NodeId, kind: NodeKind) -> Result<()> {
    sqlx::query(
        "INSERT INTO cluster_nodes (id, host, pid, kind, local_key) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (id) DO UPDATE SET seen_at = now()",
    )
    .bind(&node.0)
    .bind(host_name())
    .bind(i64::from(std::process::id()))
    .bind(kind.as_str())
    .bind(local_key())
    .execute(pool)
    .await?;
    Ok(())
}

/// Renews the node's presence every [`HEARTBEAT`]. A renewal that finds
/// the node was silent past [`NODE_TTL`] (or gone) marks it not alive for
/// that beat: its leases may have been taken meanwhile. So does a failing
/// database for longer than that. Now and then it forgets long-stopped
/// nodes and old stored signals.
async fn beat(pool: PgPool, node: NodeId, kind: NodeKind, alive: Arc<AtomicBool>) {
    let mut last_ok = tokio::time::Instant::now();
    let mut beats: u64 = 0;
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        beats += 1;
        let renewed: std::result::Result<Option<bool>, sqlx::Error> = sqlx::query_scalar(
            "WITH old AS (SELECT seen_at FROM cluster_nodes WHERE id = $1 FOR UPDATE)
             UPDATE cluster_nodes n SET seen_at = now() FROM old WHERE n.id = $1
             RETURNING old.seen_at > now() - ($2::BIGINT * INTERVAL '1 millisecond')",
        )
        .bind(&node.0)
        .bind(millis(NODE_TTL))
        .fetch_optional(&pool)
        .await;
        match renewed {
            Ok(Some(in_time)) => {
                last_ok = tokio::time::Instant::now();
                if !in_time {
                    tracing::error!(node = %node, "this node went silent longer than the cluster waits; other nodes may have taken over its sessions");
                }
                alive.store(in_time, Ordering::Release);
            }
            Ok(None) => {
                tracing::error!(node = %node, "this node was removed from the cluster; joining it again");
                alive.store(false, Ordering::Release);
                if register(&pool, &node, kind).await.is_ok() {
                    last_ok = tokio::time::Instant::now();
                }
            }
            Err(error) => {
                tracing::warn!(node = %node, %error, "cannot renew this node's presence in the cluster");
                if last_ok.elapsed() > NODE_TTL {
                    alive.store(false, Ordering::Release);
                }
            }
        }
        if beats.is_multiple_of(30) {
            let _ = sqlx::query(
                "WITH gone AS (DELETE FROM cluster_nodes
                     WHERE seen_at < now() - ($1::BIGINT * INTERVAL '1 millisecond') RETURNING id),
                  roles AS (DELETE FROM cluster_roles WHERE node IN (SELECT id FROM gone))
                 DELETE FROM session_leases WHERE node IN (SELECT id FROM gone)",
            )
            .bind(millis(FORGET_AFTER))
            .execute(&pool)
            .await;
            let _ = sqlx::query(
                "DELETE FROM cluster_messages
                 WHERE sent_at < now() - ($1::BIGINT * INTERVAL '1 millisecond')",
            )
            .bind(millis(MESSAGE_KEPT))
            .execute(&pool)
            .await;
        }
    }
}

/// Receives the other nodes' signals. A lost connection is opened again
/// (signals sent meanwhile are missed; nodes check the store as well).
async fn listen(
    mut listener: PgListener,
    pool: PgPool,
    node: NodeId,
    signals: broadcast::Sender<Received>,
) {
    loop {
        let notification = match listener.recv().await {
            Ok(notification) => notification,
            Err(error) => {
                tracing::warn!(node = %node, %error, "lost the cluster's notifications; listening again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        match decode(notification.payload(), &pool, &node).await {
            Ok(Some(received)) => {
                let _ = signals.send(received);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(node = %node, %error, "a cluster signal could not be read");
            }
        }
    }
}

/// A notification's signal; `None` for this node's own.
async fn decode(payload: &str, pool: &PgPool, me: &NodeId) -> Result<Option<Received>> {
    let bad = |what: &str| Error::Backend {
        message: format!("cluster signal {what}: {payload:.200}"),
    };
    let mut value: Value = serde_json::from_str(payload).map_err(|_| bad("is not JSON"))?;
    if value.get("from").and_then(Value::as_str) == Some(me.0.as_str()) {
        return Ok(None);
    }
    if let Some(id) = value.get("ref").and_then(Value::as_i64) {
        let body: Option<String> =
            sqlx::query_scalar("SELECT body FROM cluster_messages WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?;
        let Some(body) = body else {
            return Err(bad("refers to a message no longer kept"));
        };
        value = serde_json::from_str(&body).map_err(|_| bad("is not JSON"))?;
    }
    let field = |name: &str| value.get(name).and_then(Value::as_str);
    let from = NodeId(
        field("from")
            .ok_or_else(|| bad("names no sender"))?
            .to_owned(),
    );
    let session = field("session")
        .and_then(|key| SessionKey::from_str(key).ok())
        .ok_or_else(|| bad("names no session"))?;
    let signal = match field("kind") {
        Some("accepted") => Signal::Accepted {
            session,
            to: NodeId(
                field("to")
                    .ok_or_else(|| bad("names no holder"))?
                    .to_owned(),
            ),
        },
        Some("released") => Signal::Released { session },
        Some("reset") => Signal::Reset { session },
        Some("settings") => Signal::Settings { session },
        Some("compact") => Signal::Compact {
            session,
            extract: field("body") == Some("extract"),
        },
        Some("cancel") => Signal::Cancel {
            session,
            turn: value.get("turn").and_then(Value::as_u64).map(TurnId),
        },
        Some("event") => Signal::Event {
            session,
            body: field("body").ok_or_else(|| bad("has no body"))?.to_owned(),
        },
        _ => return Err(bad("is of no known kind")),
    };
    Ok(Some(Received { from, signal }))
}

/// Every node the database knows, with what each holds.
pub(super) async fn nodes(pool: &PgPool) -> Result<Vec<NodeInfo>> {
    let rows = sqlx::query(
        "SELECT n.id, n.host, n.pid, n.kind,
             (EXTRACT(EPOCH FROM n.started_at) * 1000)::BIGINT AS started_at,
             (EXTRACT(EPOCH FROM now() - n.seen_at) * 1000)::BIGINT AS silent_ms,
             n.seen_at > now() - ($1::BIGINT * INTERVAL '1 millisecond') AS alive,
             (SELECT COUNT(*) FROM session_leases l WHERE l.node = n.id) AS leases,
             ARRAY(SELECT r.name::TEXT FROM cluster_roles r WHERE r.node = n.id ORDER BY r.name)
                 AS roles,
             n.local_key <> '' AND n.local_key = $2 AS local
         FROM cluster_nodes n ORDER BY n.started_at, n.id",
    )
    .bind(millis(NODE_TTL))
    .bind(local_key())
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(NodeInfo {
                id: NodeId(row.try_get("id")?),
                host: row.try_get("host")?,
                pid: u32::try_from(row.try_get::<i64, _>("pid")?).unwrap_or_default(),
                kind: row.try_get("kind")?,
                started_at: row.try_get("started_at")?,
                silent_ms: row.try_get("silent_ms")?,
                alive: row.try_get("alive")?,
                leases: to_u64(row.try_get("leases")?),
                local: row.try_get("local")?,
                roles: row.try_get("roles")?,
            })
        })
        .collect()
}

#[async_trait]
impl Cluster for PgCluster {
    fn node(&self) -> &NodeId {
        &self.node
    }

    async fn acquire(&self, session: &SessionKey) -> Result<Lease> {
        self.take(Held::Session, session.as_str()).await
    }

    async fn acquire_role(&self, role: &str) -> Result<Lease> {
        self.take(Held::Role, role).await
    }

    async fn release_role(&self, role: &str) -> Result<()> {
        sqlx::query("DELETE FROM cluster_roles WHERE name = $1 AND node = $2")
            .bind(role)
            .bind(&self.node.0)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn release(&self, session: &SessionKey) -> Result<()> {
        let done = sqlx::query("DELETE FROM session_leases WHERE session_key = $1 AND node = $2")
            .bind(session.as_str())
            .bind(&self.node.0)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() > 0 {
            self.signal(Signal::Released {
                session: session.clone(),
            })
            .await?;
        }
        Ok(())
    }

    async fn signal(&self, signal: Signal) -> Result<()> {
        self.signal_all(vec![signal]).await
    }

    async fn signal_all(&self, signals: Vec<Signal>) -> Result<()> {
        let mut payloads = Vec::with_capacity(signals.len());
        for signal in &signals {
            payloads.push(self.payload(signal).await?);
        }
        // Notifications of one transaction are delivered in the order
        // they were sent.
        sqlx::query(
            "SELECT pg_notify($1, payload) FROM unnest($2::TEXT[]) WITH ORDINALITY AS p(payload, n)
             ORDER BY n",
        )
        .bind(CHANNEL)
        .bind(payloads)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn orphaned_sessions(&self) -> Result<Vec<SessionKey>> {
        let keys: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT t.session_key FROM turns t
             WHERE t.status IN ('pending', 'running')
               AND NOT EXISTS (SELECT 1 FROM session_leases l JOIN cluster_nodes n ON n.id = l.node
                   WHERE l.session_key = t.session_key
                     AND n.seen_at > now() - ($1::BIGINT * INTERVAL '1 millisecond'))
             ORDER BY t.session_key",
        )
        .bind(millis(NODE_TTL))
        .fetch_all(&self.pool)
        .await?;
        Ok(keys
            .iter()
            .filter_map(|key| SessionKey::from_str(key).ok())
            .collect())
    }

    fn signals(&self) -> broadcast::Receiver<Received> {
        self.signals.subscribe()
    }

    async fn turn_owners(&self, session: &SessionKey) -> Result<HashMap<TurnId, TurnOwner>> {
        let rows = sqlx::query(
            "SELECT t.id, t.owner_node, n.id IS NOT NULL AS alive FROM turns t
             LEFT JOIN cluster_nodes n ON n.id = t.owner_node
                 AND n.seen_at > now() - ($2::BIGINT * INTERVAL '1 millisecond')
             WHERE t.session_key = $1 AND t.status IN ('pending', 'running')",
        )
        .bind(session.as_str())
        .bind(millis(NODE_TTL))
        .fetch_all(&self.pool)
        .await?;
        let mut owners = HashMap::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.try_get("id")?;
            let node: Option<String> = row.try_get("owner_node")?;
            let alive: bool = row.try_get("alive")?;
            let owner = match node {
                Some(node) if node == self.node.0 => TurnOwner::This,
                Some(_) if alive => TurnOwner::Alive,
                _ => TurnOwner::Gone,
            };
            owners.insert(TurnId(to_u64(id)), owner);
        }
        Ok(owners)
    }

    async fn turns_of_gone_nodes(&self, turns: &[TurnId]) -> Result<HashSet<TurnId>> {
        let ids: Vec<i64> = turns.iter().map(|t| to_i64(t.0)).collect();
        let gone: Vec<i64> = sqlx::query_scalar(
            "SELECT t.id FROM turns t
             LEFT JOIN cluster_nodes n ON n.id = t.owner_node
                 AND n.seen_at > now() - ($2::BIGINT * INTERVAL '1 millisecond')
             WHERE t.id = ANY($1) AND n.id IS NULL",
        )
        .bind(&ids)
        .bind(millis(NODE_TTL))
        .fetch_all(&self.pool)
        .await?;
        Ok(gone.into_iter().map(|id| TurnId(to_u64(id))).collect())
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    async fn nodes(&self) -> Result<Vec<NodeInfo>> {
        nodes(&self.pool).await
    }

    async fn forget(&self, node: &NodeId) -> Result<()> {
        let released: Vec<String> = sqlx::query_scalar(
            "WITH gone AS (DELETE FROM cluster_nodes WHERE id = $1),
                  roles AS (DELETE FROM cluster_roles WHERE node = $1)
             DELETE FROM session_leases WHERE node = $1 RETURNING session_key",
        )
        .bind(&node.0)
        .fetch_all(&self.pool)
        .await?;
        let signals = released
            .iter()
            .filter_map(|key| SessionKey::from_str(key).ok())
            .map(|session| Signal::Released { session })
            .collect();
        self.signal_all(signals).await
    }

    async fn leave(&self) {
        self.stop_tasks();
        let released: Vec<String> =
            sqlx::query_scalar("DELETE FROM session_leases WHERE node = $1 RETURNING session_key")
                .bind(&self.node.0)
                .fetch_all(&self.pool)
                .await
                .unwrap_or_default();
        for key in released {
            if let Ok(session) = SessionKey::from_str(&key) {
                let _ = self.signal(Signal::Released { session }).await;
            }
        }
        let _ = sqlx::query(
            "WITH roles AS (DELETE FROM cluster_roles WHERE node = $1)
             DELETE FROM cluster_nodes WHERE id = $1",
        )
        .bind(&self.node.0)
        .execute(&self.pool)
        .await;
    }
}
