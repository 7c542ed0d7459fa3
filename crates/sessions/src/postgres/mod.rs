//! The session store on PostgreSQL, for several Flynn processes sharing
//! one database.
//!
//! It behaves as [`SqliteStore`](crate::SqliteStore) does, method for
//! method: the same orders, errors and defaults. What SQLite got from
//! having one writer at a time is had here from one lock per session:
//! every transaction that stamps, creates or deletes a session, or
//! numbers its messages or turns, takes an advisory lock of that session
//! first (and the store-wide one in shared mode) and keeps it to its
//! commit. Writes of different sessions do not wait for one another. So,
//! across every process:
//! - a session's message numbers and turn ids grow in the order of its
//!   commits and are never used twice (they come from sequences, taken
//!   under the session's lock; a number taken by a transaction that rolls
//!   back is lost, and numbers of different sessions are not in commit
//!   order);
//! - `sessions.updated_at` is computed from the newest stamp, so it grows
//!   with the changes (two sessions written at the same moment may get
//!   one stamp; `list` then orders them by key);
//! - a platform's message id is checked and stored under the session's
//!   lock, and the unique index `turns_external` backs the check up;
//! - writes wait for one another rather than failing, up to the
//!   connection's `lock_timeout` ([`retry::BUSY_TIMEOUT`]); a wait past it,
//!   a deadlock or a serialization failure is [`Error::Busy`], which the
//!   writes that must not be lost try again ([`retry::on_busy`]);
//! - a write across sessions (pruning idle ones) takes the store-wide lock
//!   exclusively, so no session's write is half-way meanwhile.
//!
//! Reads take no lock. The writes that touch no session (usage, pairing,
//! cron jobs) and those that change one turn's row (finishing it, marking
//! it delivered) do without a session's lock: their rows' own locks and
//! `ON CONFLICT` keep them right, and a pairing request locks the codes'
//! table, as it counts a channel's codes.
//!
//! Text sorted in SQL (keys, names) is stored `COLLATE "C"`, so it sorts by
//! its bytes as in SQLite. PostgreSQL's text cannot hold the NUL
//! character, which SQLite's can: in the few free-text values that are
//! not JSON (titles, names, tool outputs, errors...) a NUL is stored as
//! U+FFFD (see [`rows::text`]).

mod cluster;
#[cfg(test)]
mod cluster_tests;
mod rows;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use flynn_protocol::clock::now_millis;
use flynn_protocol::config::{CronJobConfig, ModelRef, VoiceReply};
use flynn_protocol::{ContentBlock, MediaFile, Message, Purpose, Role, SessionKey, Tier, TurnId};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Row, Transaction};

use crate::automation::{JobKind, JobRuns, LastRun, StoredCronJob, missed_as_str, missed_from};
use crate::cluster::{NodeId, NodeKind};
use crate::pairing::{
    ApprovedPeer, CODE_ATTEMPTS, MAX_PENDING, PairingError, PairingTicket, PendingPairing,
    new_code, normalize_code,
};
use crate::recent::{Kept, Newer, Recent};
use crate::retry;
use crate::{
    Conversations, DayUsage, Error, Files, Jobs, Pairing, Result, SessionInfo, SessionMeta,
    StoredFile, StoredMessage, ToolOutput, TurnOrigin, TurnRecord, TurnStatus, Turns, UsageLine,
    UsageLog, UsageRecord,
};
use rows::{
    Encoded, content_len, encode, file_from_row, info_from_row, meta_from_row, opt_text,
    runs_from_row, status_from, stored_from_row, text, to_i64, to_u64, turn_from_row, usage_total,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations-postgres");

/// The most connections one store opens to the server.
const MAX_CONNECTIONS: u32 = 8;

macro_rules! info_select {
    ($tail:literal) => {
        concat!(
            "SELECT s.key, s.created_at, s.updated_at, s.agent, s.tier, s.model, s.title,
                s.last_channel, s.taint, s.voice,
                (SELECT COUNT(*) FROM messages m WHERE m.session_key = s.key) AS message_count
             FROM sessions s ",
            $tail
        )
    };
}

macro_rules! message_select {
    ($tail:literal) => {
        concat!(
            "SELECT seq, turn_id, role, content, created_at,
                (SELECT principal FROM turns WHERE turns.id = messages.turn_id) AS principal
             FROM messages ",
            $tail
        )
    };
}

macro_rules! turn_select {
    ($tail:literal) => {
        concat!(
            "SELECT id, session_key, status, content, agent, owner_pid, message_seq, created_at,
                updated_at, external_id, principal FROM turns ",
            $tail
        )
    };
}

macro_rules! runs_select {
    ($tail:literal) => {
        concat!(
            "SELECT kind, name, since, scheduled_for, started_at, finished_at, outcome, error,
                session_key, turn_id FROM automation_runs ",
            $tail
        )
    };
}

macro_rules! usage_sums {
    () => {
        "COUNT(*) AS calls,
         SUM(input_tokens)::BIGINT AS input, SUM(output_tokens)::BIGINT AS output,
         SUM(cache_read_tokens)::BIGINT AS cache_read,
         SUM(cache_write_tokens)::BIGINT AS cache_write,
         COALESCE(SUM(cost_usd), 0.0)::DOUBLE PRECISION AS cost,
         COUNT(*) FILTER (WHERE cost_usd IS NULL) AS unpriced"
    };
}

type Tx = Transaction<'static, Postgres>;

/// Sessions in a PostgreSQL database, shared safely by several processes.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Histories read lately (see [`crate::recent`]); each read checks
    /// what changed since, so another process's writes are seen.
    recent: Arc<Recent>,
    /// This process's node, once it joined the cluster
    /// ([`join_cluster`](Self::join_cluster)): turns it accepts and starts
    /// are recorded as its, and it starts only turns of sessions whose
    /// lease it holds, in their order.
    node: Arc<OnceLock<NodeId>>,
}

pub use cluster::PgCluster;

impl PgStore {
    /// Connects to the database `url` names
    /// (`postgres://user:password@host:port/database`, with the options
    /// libpq-style URLs take, such as `?sslmode=require`) and brings its
    /// schema up to date; a current database is left as it is. Several
    /// processes may open the same database at once: the schema is
    /// brought up to date by one of them while the others wait.
    ///
    /// Fails with [`Error::Open`] when the URL cannot be read or the server
    /// cannot be reached or refuses the login, and [`Error::Migrate`] when
    /// the schema cannot be brought up to date; the messages name the
    /// server and never show the password.
    pub async fn open(url: &str) -> Result<Self> {
        let Connected {
            mut conn,
            location,
            password,
            server,
            options,
        } = Connected::to(url).await?;
        let open_error = |message: String| Error::Open {
            location: location.clone(),
            message: password.hide(&message),
        };
        // The schema is brought up to date on that connection, under the
        // migrator's advisory lock: processes opening together wait for
        // the first.
        if let Err(e) = MIGRATOR.run(&mut conn).await {
            let _ = conn.close().await;
            return Err(match not_permitted(&e) {
                Some(refusal) => open_error(cannot_create(refusal, &server, &options)),
                None => Error::Migrate {
                    location,
                    message: password.hide(&e.to_string()),
                },
            });
        }
        let _ = conn.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(retry::ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // A write waits this long for another's lock, as
                    // SQLite waits out its busy timeout; then it is busy.
                    // And each statement sees what was committed before it
                    // began (whatever the server's default): a write
                    // reads its session's state once it holds the
                    // session's lock.
                    let lock_timeout = format!("{}ms", retry::BUSY_TIMEOUT.as_millis());
                    sqlx::query(
                        "SELECT set_config('lock_timeout', $1, false),
                             set_config('default_transaction_isolation', 'read committed', false)",
                    )
                    .bind(lock_timeout)
                    .execute(&mut *conn)
                    .await?;
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        Ok(PgStore {
            pool,
            recent: Arc::default(),
            node: Arc::default(),
        })
    }

    /// Joins the cluster of processes sharing this database as a new node
    /// (see [`crate::cluster`]), from now on for every clone of this store:
    /// turns it accepts are recorded as this node's, and it starts a turn
    /// only while it holds the lease of the turn's session and no turn the
    /// session accepted earlier waits ([`Error::LeaseLost`],
    /// [`Error::NotNext`]). A store joins once; joining again fails.
    pub async fn join_cluster(&self, kind: NodeKind) -> Result<PgCluster> {
        let cluster = PgCluster::join(self.pool.clone(), kind).await?;
        let node = crate::cluster::Cluster::node(&cluster).clone();
        if self.node.set(node).is_err() {
            crate::cluster::Cluster::leave(&cluster).await;
            return Err(Error::Backend {
                message: "this store has joined the cluster already".to_owned(),
            });
        }
        Ok(cluster)
    }

    /// The nodes of the cluster on this database (see
    /// [`crate::cluster`]), without joining it: for `flynn doctor`.
    pub async fn cluster_nodes(&self) -> Result<Vec<crate::cluster::NodeInfo>> {
        cluster::nodes(&self.pool).await
    }

    fn node(&self) -> Option<&str> {
        self.node.get().map(|node| node.0.as_str())
    }

    /// Closes every connection; calls after it fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction holding the write lock of the session `key` (see the
    /// module's documentation).
    async fn begin_for(&self, key: &SessionKey) -> Result<Tx> {
        let mut tx = self.pool.begin().await?;
        lock_session(&mut tx, key.as_str()).await?;
        Ok(tx)
    }

    /// A transaction holding the store-wide lock exclusively.
    async fn begin_store_wide(&self) -> Result<Tx> {
        let mut tx = self.pool.begin().await?;
        lock_store(&mut tx).await?;
        Ok(tx)
    }

    /// Appends messages, marked as `turn`'s when given, in one transaction
    /// (tried again while the database is busy).
    async fn append_as(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        messages: &[Message],
    ) -> Result<Vec<u64>> {
        let messages = Encoded::all(messages)?;
        retry::on_busy(|| async {
            let mut tx = self.begin_for(key).await?;
            let result = async {
                self.fence(&mut tx, key, turn).await?;
                insert(&mut tx, key.as_str(), turn, &messages, now_millis()).await
            }
            .await;
            settle(tx, result).await
        })
        .await
    }

    /// In a cluster: refuses a write of `turn` unless this node holds its
    /// session's lease, so a node that lost it (paused past the lease
    /// time) stores nothing more of a turn the new holder has taken over.
    async fn fence(
        &self,
        conn: &mut PgConnection,
        key: &SessionKey,
        turn: Option<TurnId>,
    ) -> Result<()> {
        let (Some(node), Some(turn)) = (self.node(), turn) else {
            return Ok(());
        };
        let holds: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM session_leases WHERE session_key = $1 AND node = $2)",
        )
        .bind(key.as_str())
        .bind(node)
        .fetch_one(&mut *conn)
        .await?;
        if holds {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                session: key.to_string(),
                turn,
            })
        }
    }

    /// Stores an answer with its usage; with `completes`, also records its
    /// turn as completed, in the same transaction.
    async fn append_answer_once(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        message: &Message,
        usage: &UsageRecord,
        completes: bool,
    ) -> Result<u64> {
        let messages = Encoded::all(std::slice::from_ref(message))?;
        let mut tx = self.begin_for(key).await?;
        let result = async {
            self.fence(&mut tx, key, turn).await?;
            let now = now_millis();
            let seqs = insert(&mut tx, key.as_str(), turn, &messages, now).await?;
            insert_usage(&mut tx, usage, now).await?;
            if let Some(turn) = turn.filter(|_| completes) {
                // No row: the turn is gone (its session was cleared
                // meanwhile); the answer stays all the same.
                sqlx::query("UPDATE turns SET status = $2, updated_at = $3 WHERE id = $1")
                    .bind(to_i64(turn.0))
                    .bind(TurnStatus::Completed.as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
            Ok(seqs.first().copied().unwrap_or_default())
        }
        .await;
        settle(tx, result).await
    }

    /// Accepts a message as a pending turn or, with `start`, as a running
    /// one whose message is in the history (`accept_and_start`): one
    /// transaction either way.
    async fn accept_once(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
        start: bool,
    ) -> Result<TurnRecord> {
        let now = now_millis();
        let encoded = encode(content)?;
        let title = crate::title::from_content(content);
        let mut tx = self.begin_for(key).await?;
        let result = async {
            let message = start.then(|| Encoded {
                role: Role::User.as_str(),
                content: encoded.clone(),
            });
            let node = self.node();
            let id = accept_in(&mut tx, key, &encoded, title.as_deref(), origin, node, now).await?;
            let Some(message) = message else {
                return Ok((id, None));
            };
            // In a cluster, the turn starts here only on the session's
            // lease holder and with no other turn of the session open
            // (one accepted on another node waits for its start).
            if node.is_some() && !may_start_at_once(&mut tx, key, id, node).await? {
                return Ok((id, None));
            }
            let seqs = insert(&mut tx, key.as_str(), Some(id), &[message], now).await?;
            let seq = seqs.first().copied().unwrap_or_default();
            sqlx::query("UPDATE turns SET status = 'running', message_seq = $2 WHERE id = $1")
                .bind(to_i64(id.0))
                .bind(to_i64(seq))
                .execute(&mut *tx)
                .await?;
            Ok((id, Some(seq)))
        }
        .await;
        let (id, message_seq) = settle(tx, result).await?;
        Ok(TurnRecord {
            id,
            session: key.clone(),
            status: if message_seq.is_some() {
                TurnStatus::Running
            } else {
                TurnStatus::Pending
            },
            content: content.to_vec(),
            origin: origin.clone(),
            message_seq,
            created_at: now,
            updated_at: now,
        })
    }

    async fn start_turn_once(&self, turn: TurnId, owner_pid: u32) -> Result<u64> {
        // The session's lock, so its key first (a turn never moves).
        let key: Option<String> = sqlx::query_scalar("SELECT session_key FROM turns WHERE id = $1")
            .bind(to_i64(turn.0))
            .fetch_optional(&self.pool)
            .await?;
        let Some(key) = key else {
            return Err(Error::UnknownTurn { turn });
        };
        let mut tx = self.pool.begin().await?;
        lock_session(&mut tx, &key).await?;
        let result = start_turn_in(&mut tx, turn, owner_pid, self.node()).await;
        settle(tx, result).await
    }

    async fn finish_turn_once(&self, turn: TurnId, status: TurnStatus) -> Result<()> {
        // In a cluster, only the holder of the turn's session finishes it.
        let done = sqlx::query(
            "UPDATE turns SET status = $2, updated_at = $3 WHERE id = $1
               AND ($4::TEXT IS NULL OR EXISTS (SELECT 1 FROM session_leases l
                   WHERE l.session_key = turns.session_key AND l.node = $4))",
        )
        .bind(to_i64(turn.0))
        .bind(status.as_str())
        .bind(now_millis())
        .bind(self.node())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() > 0 {
            return Ok(());
        }
        let session: Option<String> =
            sqlx::query_scalar("SELECT session_key FROM turns WHERE id = $1")
                .bind(to_i64(turn.0))
                .fetch_optional(&self.pool)
                .await?;
        match session {
            Some(session) => Err(Error::LeaseLost { session, turn }),
            None => Err(Error::UnknownTurn { turn }),
        }
    }

    /// [`Pairing::pairing_request`], with fresh codes from `codes`.
    async fn pairing_request_with(
        &self,
        channel: &str,
        sender: &str,
        name: Option<&str>,
        now: i64,
        ttl_ms: i64,
        codes: &mut (dyn FnMut() -> std::result::Result<String, getrandom::Error> + Send),
    ) -> Result<PairingTicket> {
        let mut tx = self.pool.begin().await?;
        let result = pairing_request_in(&mut tx, channel, sender, name, now, ttl_ms, codes).await;
        match result {
            // A full channel's refusal is an answer, not a failure: the
            // expired codes swept on the way stay swept.
            Err(Error::Pairing(PairingError::Full { .. })) => {
                tx.commit().await?;
                result
            }
            result => settle(tx, result).await,
        }
    }

    /// `kept` with the messages stored since it was read, or `None` when
    /// the history changed otherwise (compacted, cleared) and must be read
    /// whole.
    async fn brought_up_to_date(&self, key: &SessionKey, kept: Kept) -> Result<Option<Kept>> {
        // One statement, so one snapshot: the session's count, then the
        // newer rows, if any, each beside it (a row of NULLs when there
        // are none).
        let rows = sqlx::query(
            "SELECT c.total, m.seq, m.pos, m.turn_id, m.role, m.content, m.created_at,
                (SELECT principal FROM turns WHERE turns.id = m.turn_id) AS principal
             FROM (SELECT COUNT(*) AS total FROM messages WHERE session_key = $1) AS c
             LEFT JOIN messages AS m ON m.session_key = $1 AND m.seq > $2
             ORDER BY m.pos",
        )
        .bind(key.as_str())
        .bind(to_i64(kept.last_seq()))
        .fetch_all(&self.pool)
        .await?;
        let count: i64 = match rows.first() {
            Some(row) => row.try_get("total")?,
            None => 0,
        };
        let mut newer = Vec::with_capacity(rows.len());
        for row in &rows {
            let pos: Option<i64> = row.try_get("pos")?;
            let Some(pos) = pos else {
                continue;
            };
            newer.push(Newer {
                pos,
                bytes: content_len(row),
                message: stored_from_row(key, row)?,
            });
        }
        Ok(Recent::extend(kept, newer, to_u64(count)))
    }

    async fn read_messages(
        &self,
        key: &SessionKey,
        query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<StoredMessage>> {
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter().map(|row| stored_from_row(key, row)).collect()
    }
}

/// Commits `tx` when `result` is a success and rolls it back otherwise;
/// returns `result` (or the commit's failure).
async fn settle<T>(tx: Tx, result: Result<T>) -> Result<T> {
    match result {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(error) => {
            // A rollback that fails leaves the connection for the pool to
            // test and drop; the transaction ends with it either way.
            if let Err(e) = tx.rollback().await {
                tracing::debug!(error = %e, "rolling back a session store transaction failed");
            }
            Err(error)
        }
    }
}

/// The store-wide advisory lock (the one-key form): taken in shared mode
/// by every write of one session, exclusively by writes across sessions.
const LOCK_STORE: i64 = 0x666c_796e_6e5f_7374;
/// The class of a session's advisory lock (the first of the two-key
/// form; the second is the hash of the session's key).
const LOCK_SESSION: i32 = 0x666c_7373;

/// Takes the write lock of the session `key` for the rest of the
/// transaction (and the store-wide one in shared mode), waiting up to the
/// lock timeout for another writer of the session to commit.
async fn lock_session(conn: &mut PgConnection, key: &str) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1), pg_advisory_xact_lock($2, hashtext($3))")
        .bind(LOCK_STORE)
        .bind(LOCK_SESSION)
        .bind(key)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Takes the store-wide lock exclusively for the rest of the
/// transaction: no session's write runs meanwhile.
async fn lock_store(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK_STORE)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Creates the session if needed and stamps it as the most recently
/// updated one: `updated_at` is the wall clock, but after every other
/// session's committed stamp (by a millisecond when writes come faster
/// than the clock ticks), so `list` shows the order of changes. Run under
/// the session's lock.
async fn touch(conn: &mut PgConnection, key: &str, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO sessions (key, created_at, updated_at)
         SELECT $1, stamp, stamp
         FROM (SELECT GREATEST($2, COALESCE(MAX(updated_at), 0) + 1) AS stamp FROM sessions) AS s
         ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at",
    )
    .bind(key)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Inserts messages at the end of the session (position = sequence),
/// stamping it. Nothing to insert changes nothing.
async fn insert(
    conn: &mut PgConnection,
    key: &str,
    turn: Option<TurnId>,
    messages: &[Encoded],
    now: i64,
) -> Result<Vec<u64>> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    touch(conn, key, now).await?;
    store_messages(conn, key, turn, messages, None, now).await
}

/// Stores `messages` under the next sequence numbers, in order: at the
/// positions from `first_pos` on, or (with `None`) each at its own number,
/// which sorts it after every message stored before (no message's
/// position exceeds its number: appends are equal, compaction puts new
/// numbers at old positions). Run under the session's lock.
async fn store_messages(
    conn: &mut PgConnection,
    key: &str,
    turn: Option<TurnId>,
    messages: &[Encoded],
    first_pos: Option<i64>,
    now: i64,
) -> Result<Vec<u64>> {
    let count = i64::try_from(messages.len()).unwrap_or(i64::MAX);
    let roles: Vec<&str> = messages.iter().map(|m| m.role).collect();
    let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
    // The numbers first, in order, so the messages take them in theirs.
    let mut seqs: Vec<i64> =
        sqlx::query_scalar("SELECT nextval('message_seqs') FROM generate_series(1, $1)")
            .bind(count)
            .fetch_all(&mut *conn)
            .await?;
    seqs.sort_unstable();
    let stored = sqlx::query(
        "INSERT INTO messages (seq, session_key, pos, turn_id, role, content, created_at)
         SELECT m.seq, $2, COALESCE($3 + m.n - 1, m.seq), $4, m.role, m.content, $7
         FROM UNNEST($1::BIGINT[], $5::TEXT[], $6::TEXT[]) WITH ORDINALITY AS m (seq, role, content, n)",
    )
    .bind(&seqs)
    .bind(key)
    .bind(first_pos)
    .bind(turn.map(|t| to_i64(t.0)))
    .bind(roles)
    .bind(contents)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    if usize::try_from(stored.rows_affected()).ok() != Some(messages.len()) {
        return Err(Error::Backend {
            message: format!(
                "{} of {} messages stored",
                stored.rows_affected(),
                messages.len()
            ),
        });
    }
    seqs.sort_unstable();
    Ok(seqs.into_iter().map(to_u64).collect())
}

/// Stores a pending turn with its message, refusing one whose platform id
/// the session has already. Run under the session's lock.
#[allow(clippy::too_many_arguments)]
async fn accept_in(
    conn: &mut PgConnection,
    key: &SessionKey,
    encoded: &str,
    title: Option<&str>,
    origin: &TurnOrigin,
    node: Option<&str>,
    now: i64,
) -> Result<TurnId> {
    let external_id = opt_text(origin.external_id.as_deref());
    // `touch`, also recording the channel and giving an untitled session
    // its title, in one statement.
    sqlx::query(
        "INSERT INTO sessions (key, created_at, updated_at, last_channel, title)
         SELECT $1, stamp, stamp, $3, $4
         FROM (SELECT GREATEST($2, COALESCE(MAX(updated_at), 0) + 1) AS stamp FROM sessions) AS s
         ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at,
             last_channel = excluded.last_channel,
             title = COALESCE(sessions.title, excluded.title)",
    )
    .bind(key.as_str())
    .bind(now)
    .bind(key.channel())
    .bind(opt_text(title))
    .execute(&mut *conn)
    .await?;
    // The id is the next after the high-water mark, as for messages. A
    // platform id the session has already inserts nothing: the whole
    // transaction is then rolled back, the number given back with it.
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO turns (id, session_key, status, content, agent, owner_pid, created_at,
             updated_at, external_id, principal, owner_node)
         VALUES (nextval('turn_ids'), $1, 'pending', $2, $3, $4, $5, $5, $6, $7, $8)
         ON CONFLICT (session_key, external_id) WHERE external_id IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(key.as_str())
    .bind(encoded)
    .bind(text(&origin.agent))
    .bind(i64::from(origin.owner_pid))
    .bind(now)
    .bind(&external_id)
    .bind(origin.principal.to_string())
    .bind(node)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = id {
        return Ok(TurnId(to_u64(id)));
    }
    let Some(external_id) = external_id else {
        return Err(Error::Backend {
            message: "a turn was not stored, and no platform id explains it".to_owned(),
        });
    };
    let seen: Option<i64> =
        sqlx::query_scalar("SELECT id FROM turns WHERE session_key = $1 AND external_id = $2")
            .bind(key.as_str())
            .bind(&external_id)
            .fetch_optional(&mut *conn)
            .await?;
    match seen {
        Some(turn) => Err(Error::Duplicate {
            session: key.to_string(),
            external_id: origin.external_id.clone().unwrap_or_default(),
            turn: TurnId(to_u64(turn)),
        }),
        None => Err(Error::Backend {
            message: format!(
                "a turn with the platform id {external_id} was neither stored nor found"
            ),
        }),
    }
}

/// Marks `turn` running and puts its message in the history (once: a turn
/// started again after a crash keeps the message it has). Run under its
/// session's lock; the turn's row is locked too, so a turn finished (say,
/// cancelled) meanwhile is finished after this, not overwritten by it.
/// Whether a turn just accepted may start in the same transaction: this
/// node holds the session's lease and no other turn of it is open.
async fn may_start_at_once(
    conn: &mut PgConnection,
    key: &SessionKey,
    turn: TurnId,
    node: Option<&str>,
) -> Result<bool> {
    let may: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM session_leases WHERE session_key = $1 AND node = $3)
             AND NOT EXISTS (SELECT 1 FROM turns WHERE session_key = $1 AND id <> $2
                 AND status IN ('pending', 'running'))",
    )
    .bind(key.as_str())
    .bind(to_i64(turn.0))
    .bind(node)
    .fetch_one(&mut *conn)
    .await?;
    Ok(may)
}

/// In a cluster: refuses to start `turn` unless this node holds its
/// session's lease and no turn the session accepted before it waits.
async fn check_turn_order(
    conn: &mut PgConnection,
    key: &str,
    turn: TurnId,
    node: &str,
) -> Result<()> {
    let row = sqlx::query(
        "SELECT EXISTS (SELECT 1 FROM session_leases WHERE session_key = $1 AND node = $3)
                 AS holds,
             (SELECT MIN(id) FROM turns WHERE session_key = $1 AND id < $2
                 AND status = 'pending') AS waiting",
    )
    .bind(key)
    .bind(to_i64(turn.0))
    .bind(node)
    .fetch_one(&mut *conn)
    .await?;
    if !row.try_get::<bool, _>("holds")? {
        return Err(Error::LeaseLost {
            session: key.to_owned(),
            turn,
        });
    }
    if let Some(waiting) = row.try_get::<Option<i64>, _>("waiting")? {
        return Err(Error::NotNext {
            turn,
            waiting: TurnId(to_u64(waiting)),
        });
    }
    Ok(())
}

async fn start_turn_in(
    conn: &mut PgConnection,
    turn: TurnId,
    owner_pid: u32,
    node: Option<&str>,
) -> Result<u64> {
    let now = now_millis();
    let row = sqlx::query(
        "SELECT session_key, status, message_seq, content FROM turns WHERE id = $1 FOR UPDATE",
    )
    .bind(to_i64(turn.0))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Err(Error::UnknownTurn { turn });
    };
    let key: String = row.try_get("session_key")?;
    if SessionKey::from_str(&key).is_err() {
        return Err(Error::UnknownTurn { turn });
    }
    let status = status_from(&row.try_get::<String, _>("status")?);
    let message_seq: Option<i64> = row.try_get("message_seq")?;
    if let Some(node) = node
        && status.is_open()
    {
        check_turn_order(conn, &key, turn, node).await?;
    }
    let seq = match (status, message_seq) {
        (TurnStatus::Running, Some(seq)) => to_u64(seq),
        (TurnStatus::Pending | TurnStatus::Running, _) => {
            // Stored as `accept` encoded it; checked, then copied.
            let content: String = row.try_get("content")?;
            serde_json::from_str::<Vec<ContentBlock>>(&content)
                .map_err(|source| Error::CorruptTurn { turn, source })?;
            let message = Encoded {
                role: Role::User.as_str(),
                content,
            };
            let seqs = insert(conn, &key, Some(turn), &[message], now).await?;
            seqs.first().copied().unwrap_or_default()
        }
        (status, _) => {
            return Err(Error::TurnFinished { turn, status });
        }
    };
    sqlx::query(
        "UPDATE turns SET status = 'running', message_seq = $2, owner_pid = $3, updated_at = $4,
             owner_node = COALESCE($5, owner_node)
         WHERE id = $1",
    )
    .bind(to_i64(turn.0))
    .bind(to_i64(seq))
    .bind(i64::from(owner_pid))
    .bind(now)
    .bind(node)
    .execute(&mut *conn)
    .await?;
    Ok(seq)
}

/// The steps of a pairing request, in the caller's transaction.
async fn pairing_request_in(
    conn: &mut PgConnection,
    channel: &str,
    sender: &str,
    name: Option<&str>,
    now: i64,
    ttl_ms: i64,
    codes: &mut (dyn FnMut() -> std::result::Result<String, getrandom::Error> + Send),
) -> Result<PairingTicket> {
    // Requests take turns (as under SQLite's write lock): a request counts
    // the channel's codes and looks for the sender's, which two requests
    // at once would both miss. Reads and approvals go on meanwhile.
    sqlx::query("LOCK TABLE pairing_codes IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM pairing_codes WHERE expires_at <= $1")
        .bind(now)
        .execute(&mut *conn)
        .await?;
    let pending: Option<(String, i64)> = sqlx::query_as(
        "SELECT code, expires_at FROM pairing_codes WHERE channel = $1 AND sender = $2",
    )
    .bind(channel)
    .bind(sender)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some((code, expires_at)) = pending {
        return Ok(PairingTicket {
            code,
            fresh: false,
            expires_at,
        });
    }
    // A full channel refuses new codes; the ones given keep waiting (a
    // flood of accounts must not push out a real request).
    let (pending, frees_at): (i64, Option<i64>) =
        sqlx::query_as("SELECT COUNT(*), MIN(expires_at) FROM pairing_codes WHERE channel = $1")
            .bind(channel)
            .fetch_one(&mut *conn)
            .await?;
    let pending = usize::try_from(pending).unwrap_or(usize::MAX);
    if pending >= MAX_PENDING {
        return Err(PairingError::Full {
            channel: channel.to_owned(),
            pending,
            frees_at: frees_at.unwrap_or(now),
        }
        .into());
    }
    let expires_at = now.saturating_add(ttl_ms.max(1));
    let no_code = |reason: String| -> Error {
        PairingError::NoCode {
            channel: channel.to_owned(),
            reason,
        }
        .into()
    };
    for _ in 0..CODE_ATTEMPTS {
        let fresh = codes()
            .map_err(|e| no_code(format!("the operating system's random source failed ({e})")))?;
        let inserted = sqlx::query(
            "INSERT INTO pairing_codes (channel, code, sender, name, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(channel)
        .bind(&fresh)
        .bind(sender)
        .bind(opt_text(name))
        .bind(now)
        .bind(expires_at)
        .execute(&mut *conn)
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(PairingTicket {
                code: fresh,
                fresh: true,
                expires_at,
            });
        }
    }
    Err(no_code(format!(
        "the {CODE_ATTEMPTS} codes tried were all taken"
    )))
}

async fn insert_usage(conn: &mut PgConnection, record: &UsageRecord, now: i64) -> Result<()> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO usage (session_key, provider, model, tier, purpose, input_tokens,
             output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at, partial)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(record.session.as_str())
    .bind(text(&record.provider))
    .bind(text(&record.model))
    .bind(record.tier.as_str())
    .bind(record.purpose.as_str())
    .bind(count(record.usage.input_tokens))
    .bind(count(record.usage.output_tokens))
    .bind(count(record.usage.cache_read_tokens))
    .bind(count(record.usage.cache_write_tokens))
    .bind(record.cost_usd)
    .bind(now)
    .bind(record.partial)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Where the server is, for messages: `host:port`, or the socket's
/// directory.
/// A connection of its own to the server a URL names, and what its errors
/// need to say where it went.
pub(crate) struct Connected {
    pub(crate) conn: PgConnection,
    /// The URL with its password hidden.
    location: String,
    password: Password,
    /// `host:port`, or the socket.
    server: String,
    options: PgConnectOptions,
}

impl Connected {
    /// Connects, reporting at once what failed (an unreadable URL, a
    /// server that refuses or does not answer, a refused login), never
    /// the password. A pool would try a refused connection again until
    /// its timeout, then say only that it timed out.
    pub(crate) async fn to(url: &str) -> Result<Connected> {
        let location = crate::redact(url);
        let password = Password::of(url);
        let open_error = |message: String| Error::Open {
            location: location.clone(),
            message: password.hide(&message),
        };
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            open_error(format!(
                "the URL cannot be read as a PostgreSQL URL ({e}); write it as postgres://user:password@host:port/database"
            ))
        })?;
        let options = if options.get_application_name().is_none() {
            options.application_name("flynn")
        } else {
            options
        };
        let server = server_of(&options);
        let connecting = PgConnection::connect_with(&options);
        let conn = match tokio::time::timeout(retry::ACQUIRE_TIMEOUT, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(open_error(connect_failure(&e, &server, &options))),
            Err(_) => {
                return Err(open_error(format!(
                    "the PostgreSQL server at {server} did not answer within {} s; check that it runs and that this machine may reach it",
                    retry::ACQUIRE_TIMEOUT.as_secs()
                )));
            }
        };
        Ok(Connected {
            conn,
            location,
            password,
            server,
            options,
        })
    }
}

fn server_of(options: &PgConnectOptions) -> String {
    match options.get_socket() {
        Some(dir) => format!("{} (a Unix socket)", dir.display()),
        None if options.get_host().starts_with('/') => {
            format!("{} (a Unix socket)", options.get_host())
        }
        None => format!("{}:{}", options.get_host(), options.get_port()),
    }
}

/// What went wrong connecting, in words that say what to check.
fn connect_failure(error: &sqlx::Error, server: &str, options: &PgConnectOptions) -> String {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    match error {
        sqlx::Error::Io(e) => format!(
            "cannot reach the PostgreSQL server at {server}: {e} (check that it runs and listens there)"
        ),
        sqlx::Error::Tls(e) => format!(
            "the TLS handshake with the PostgreSQL server at {server} failed: {e} (check sslmode and the certificates in sessions.url)"
        ),
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("28P01" | "28000") => format!(
                "the PostgreSQL server at {server} refused the login of user '{user}': {} (check the user and password in sessions.url)",
                db.message()
            ),
            Some("3D000") => format!(
                "the PostgreSQL server at {server} has no database '{database}': {} (create it, or name another in sessions.url)",
                db.message()
            ),
            Some("42501") => format!(
                "user '{user}' may not connect to database '{database}' on the PostgreSQL server at {server}: {}",
                db.message()
            ),
            _ => format!(
                "the PostgreSQL server at {server} refused the connection: {}",
                db.message()
            ),
        },
        other => format!("cannot connect to the PostgreSQL server at {server}: {other}"),
    }
}

/// The database's refusal, when the schema could not be made because the
/// user may not create tables.
fn not_permitted(error: &sqlx::migrate::MigrateError) -> Option<&dyn sqlx::error::DatabaseError> {
    use sqlx::migrate::MigrateError;
    let (MigrateError::Execute(sqlx::Error::Database(db))
    | MigrateError::ExecuteMigration(sqlx::Error::Database(db), _)) = error
    else {
        return None;
    };
    // insufficient_privilege
    (db.code().as_deref() == Some("42501")).then_some(&**db)
}

/// What to do when the user may not create the store's tables.
fn cannot_create(
    refusal: &dyn sqlx::error::DatabaseError,
    server: &str,
    options: &PgConnectOptions,
) -> String {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    format!(
        "user '{user}' may not create the session store's tables in database '{database}' on the PostgreSQL server at {server}: {} (since PostgreSQL 15 only a database's owner may create tables in its public schema: make '{user}' the owner of '{database}', or GRANT CREATE ON SCHEMA public TO {user})",
        refusal.message()
    )
}

/// The password of a URL, to keep out of messages.
struct Password {
    /// The password as written in the URL and, if different, decoded.
    forms: Vec<String>,
}

impl Password {
    /// The password of `url`: in its `user:password@` part, or in a
    /// `password=` option after `?`.
    fn of(url: &str) -> Password {
        let mut forms = Vec::new();
        let Some((_, rest)) = url.split_once("://") else {
            return Password { forms };
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let in_userinfo = rest[..authority_end]
            .rsplit_once('@')
            .and_then(|(userinfo, _host)| userinfo.split_once(':'))
            .map(|(_user, password)| password);
        let query = rest[authority_end..]
            .split_once('?')
            .map_or("", |(_, query)| query.split('#').next().unwrap_or_default());
        let in_query = query.split('&').filter_map(|option| {
            let (name, value) = option.split_once('=')?;
            name.eq_ignore_ascii_case("password").then_some(value)
        });
        for written in in_userinfo.into_iter().chain(in_query) {
            if written.is_empty() {
                continue;
            }
            forms.push(written.to_owned());
            let decoded = percent_decoded(written);
            if decoded != written && !decoded.is_empty() {
                forms.push(decoded);
            }
        }
        Password { forms }
    }

    /// `message` with every form of the password replaced by `***`.
    fn hide(&self, message: &str) -> String {
        let mut message = message.to_owned();
        for form in &self.forms {
            message = message.replace(form.as_str(), "***");
        }
        message
    }
}

/// `text` with its `%XX` escapes decoded (invalid UTF-8 replaced).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[async_trait]
impl Conversations for PgStore {
    async fn close(&self) {
        PgStore::close(self).await;
    }

    async fn append(&self, key: &SessionKey, messages: &[Message]) -> Result<Vec<u64>> {
        self.append_as(key, None, messages).await
    }

    async fn history(&self, key: &SessionKey) -> Result<Vec<StoredMessage>> {
        let kept = match self.recent.take(key) {
            Some(kept) => self.brought_up_to_date(key, kept).await?,
            None => None,
        };
        let kept = match kept {
            Some(kept) => kept,
            None => {
                let sql = message_select!("WHERE session_key = $1 ORDER BY pos");
                let rows = sqlx::query(sql)
                    .bind(key.as_str())
                    .fetch_all(&self.pool)
                    .await?;
                let mut kept = Kept {
                    messages: Vec::with_capacity(rows.len()),
                    bytes: 0,
                };
                for row in &rows {
                    kept.bytes += content_len(row);
                    kept.messages.push(stored_from_row(key, row)?);
                }
                kept
            }
        };
        let history = kept.messages.clone();
        self.recent.put(key, kept);
        Ok(history)
    }

    async fn history_since(&self, key: &SessionKey, after: u64) -> Result<Vec<StoredMessage>> {
        // Appended messages have `pos = seq`; what `replace_history` wrote
        // (a summary) has a new number at an old position, below it.
        let sql = message_select!("WHERE session_key = $1 AND seq > $2 AND pos = seq ORDER BY pos");
        self.read_messages(key, sqlx::query(sql).bind(key.as_str()).bind(to_i64(after)))
            .await
    }

    async fn history_page(
        &self,
        key: &SessionKey,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut page = match before {
            Some(before) => {
                let pos: Option<i64> = sqlx::query_scalar(
                    "SELECT pos FROM messages WHERE session_key = $1 AND seq = $2",
                )
                .bind(key.as_str())
                .bind(to_i64(before))
                .fetch_optional(&self.pool)
                .await?;
                let Some(pos) = pos else {
                    return Err(Error::UnknownMessage {
                        session: key.to_string(),
                        seq: before,
                    });
                };
                let sql = message_select!(
                    "WHERE session_key = $1 AND pos < $2 ORDER BY pos DESC LIMIT $3"
                );
                self.read_messages(
                    key,
                    sqlx::query(sql).bind(key.as_str()).bind(pos).bind(limit),
                )
                .await?
            }
            None => {
                let sql = message_select!("WHERE session_key = $1 ORDER BY pos DESC LIMIT $2");
                self.read_messages(key, sqlx::query(sql).bind(key.as_str()).bind(limit))
                    .await?
            }
        };
        page.reverse();
        Ok(page)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>> {
        let rows = sqlx::query(info_select!("ORDER BY s.updated_at DESC, s.key"))
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.extend(info_from_row(row)?);
        }
        Ok(out)
    }

    async fn info(&self, key: &SessionKey) -> Result<Option<SessionInfo>> {
        let row = sqlx::query(info_select!("WHERE s.key = $1"))
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => info_from_row(&row),
            None => Ok(None),
        }
    }

    async fn clear(&self, key: &SessionKey) -> Result<bool> {
        // Under the session's lock, so a write to the session waits for the
        // reset (or the reset for it) instead of meeting it half-way.
        let mut tx = self.begin_for(key).await?;
        let result = sqlx::query("DELETE FROM sessions WHERE key = $1")
            .bind(key.as_str())
            .execute(&mut *tx)
            .await
            .map(|done| done.rows_affected() > 0)
            .map_err(Error::from);
        settle(tx, result).await
    }

    async fn replace_history(
        &self,
        key: &SessionKey,
        upto: u64,
        replacement: &[Message],
    ) -> Result<Vec<u64>> {
        let now = now_millis();
        let replacement = Encoded::all(replacement)?;
        let mut tx = self.begin_for(key).await?;
        let result = async {
            let pos: Option<i64> =
                sqlx::query_scalar("SELECT pos FROM messages WHERE session_key = $1 AND seq = $2")
                    .bind(key.as_str())
                    .bind(to_i64(upto))
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some(pos) = pos else {
                return Err(Error::UnknownMessage {
                    session: key.to_string(),
                    seq: upto,
                });
            };
            sqlx::query("DELETE FROM messages WHERE session_key = $1 AND pos <= $2")
                .bind(key.as_str())
                .bind(pos)
                .execute(&mut *tx)
                .await?;
            touch(&mut tx, key.as_str(), now).await?;
            if replacement.is_empty() {
                return Ok(Vec::new());
            }
            // The replacement takes the positions just freed, ending at
            // `pos`, so what was appended after `upto` stays after it.
            let count = i64::try_from(replacement.len()).unwrap_or(i64::MAX);
            let first = pos.saturating_sub(count).saturating_add(1);
            store_messages(&mut tx, key.as_str(), None, &replacement, Some(first), now).await
        }
        .await;
        settle(tx, result).await
    }

    async fn metadata(&self, key: &SessionKey) -> Result<SessionMeta> {
        let row = sqlx::query(
            "SELECT agent, tier, model, title, last_channel, taint, voice FROM sessions WHERE key = $1",
        )
        .bind(key.as_str())
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => meta_from_row(&row),
            None => Ok(SessionMeta::default()),
        }
    }

    async fn set_metadata(&self, key: &SessionKey, meta: &SessionMeta) -> Result<()> {
        let now = now_millis();
        let model = meta.model.as_ref().map(ModelRef::to_string);
        let mut tx = self.begin_for(key).await?;
        let result = async {
            touch(&mut tx, key.as_str(), now).await?;
            sqlx::query(
                "UPDATE sessions SET agent = $2, tier = $3, model = $4, title = $5, last_channel = $6,
                     voice = $7
                 WHERE key = $1",
            )
            .bind(key.as_str())
            .bind(opt_text(meta.agent.as_deref()))
            .bind(meta.tier.map(Tier::as_str))
            .bind(opt_text(model.as_deref()))
            .bind(opt_text(meta.title.as_deref()))
            .bind(opt_text(meta.last_channel.as_deref()))
            .bind(meta.voice.map(VoiceReply::as_str))
            .execute(&mut *tx)
            .await?;
            Ok(())
        }
        .await;
        settle(tx, result).await
    }

    async fn set_taint(&self, key: &SessionKey, taint: Option<&str>) -> Result<()> {
        let mut tx = self.begin_for(key).await?;
        let result = async {
            touch(&mut tx, key.as_str(), now_millis()).await?;
            sqlx::query("UPDATE sessions SET taint = $2 WHERE key = $1")
                .bind(key.as_str())
                .bind(opt_text(taint))
                .execute(&mut *tx)
                .await?;
            Ok(())
        }
        .await;
        settle(tx, result).await
    }

    async fn put_tool_output(&self, key: &SessionKey, output: &ToolOutput) -> Result<()> {
        let call_id = text(&output.call_id);
        let tool = text(&output.tool);
        let content = text(&output.content);
        // Under the session's lock: the session it creates, if needed, must
        // not be deleted by a reset half-way.
        let mut tx = self.begin_for(key).await?;
        let result = async {
            sqlx::query(
                "INSERT INTO sessions (key, created_at, updated_at) VALUES ($1, $2, $2)
                 ON CONFLICT (key) DO NOTHING",
            )
            .bind(key.as_str())
            .bind(now_millis())
            .execute(&mut *tx)
            .await?;
            // A call id already kept keeps its output: a later call that
            // repeats the id (a server numbering its calls afresh in every
            // answer) must not take an earlier call's place. The same
            // output again (a retried write) is fine.
            let inserted = sqlx::query(
                "INSERT INTO tool_outputs (session_key, call_id, tool, content, created_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (session_key, call_id) DO NOTHING",
            )
            .bind(key.as_str())
            .bind(&call_id)
            .bind(&tool)
            .bind(&content)
            .bind(output.created_at)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                let same: bool = sqlx::query_scalar(
                    "SELECT tool = $3 AND content = $4 FROM tool_outputs
                     WHERE session_key = $1 AND call_id = $2",
                )
                .bind(key.as_str())
                .bind(&call_id)
                .bind(&tool)
                .bind(&content)
                .fetch_one(&mut *tx)
                .await?;
                if !same {
                    return Err(Error::ToolOutputTaken {
                        session: key.to_string(),
                        call_id: output.call_id.clone(),
                    });
                }
            }
            Ok(())
        }
        .await;
        settle(tx, result).await
    }

    async fn tool_output(&self, key: &SessionKey, call_id: &str) -> Result<Option<ToolOutput>> {
        let row = sqlx::query(
            "SELECT call_id, tool, content, created_at FROM tool_outputs
             WHERE session_key = $1 AND call_id = $2",
        )
        .bind(key.as_str())
        .bind(text(call_id))
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(ToolOutput {
                call_id: row.try_get("call_id")?,
                tool: row.try_get("tool")?,
                content: row.try_get("content")?,
                created_at: row.try_get("created_at")?,
            })
        })
        .transpose()
    }

    async fn prune_idle(&self, before: i64) -> Result<Vec<SessionKey>> {
        let keys: Vec<String> = retry::on_busy(|| async {
            let mut tx = self.begin_store_wide().await?;
            let result = sqlx::query_scalar(
                "DELETE FROM sessions WHERE updated_at < $1 AND NOT EXISTS (
                     SELECT 1 FROM turns t WHERE t.session_key = sessions.key
                         AND t.status IN ('pending', 'running'))
                 RETURNING key",
            )
            .bind(before)
            .fetch_all(&mut *tx)
            .await
            .map_err(Error::from);
            settle(tx, result).await
        })
        .await?;
        let mut keys: Vec<SessionKey> = keys
            .iter()
            .filter_map(|key| SessionKey::from_str(key).ok())
            .collect();
        keys.sort();
        Ok(keys)
    }
}

#[async_trait]
impl Turns for PgStore {
    async fn append_answer(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        message: &Message,
        usage: &UsageRecord,
    ) -> Result<u64> {
        retry::on_busy(|| self.append_answer_once(key, turn, message, usage, false)).await
    }

    async fn append_last_answer(
        &self,
        key: &SessionKey,
        turn: TurnId,
        message: &Message,
        usage: &UsageRecord,
    ) -> Result<u64> {
        retry::on_busy(|| self.append_answer_once(key, Some(turn), message, usage, true)).await
    }

    async fn append_for_turn(
        &self,
        key: &SessionKey,
        turn: TurnId,
        messages: &[Message],
    ) -> Result<Vec<u64>> {
        self.append_as(key, Some(turn), messages).await
    }

    async fn accept(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord> {
        retry::on_busy(|| self.accept_once(key, content, origin, false)).await
    }

    async fn start_turn(&self, turn: TurnId, owner_pid: u32) -> Result<u64> {
        retry::on_busy(|| self.start_turn_once(turn, owner_pid)).await
    }

    async fn accept_and_start(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord> {
        retry::on_busy(|| self.accept_once(key, content, origin, true)).await
    }

    async fn finish_turn(&self, turn: TurnId, status: TurnStatus) -> Result<()> {
        retry::on_busy(|| self.finish_turn_once(turn, status)).await
    }

    async fn turn(&self, turn: TurnId) -> Result<Option<TurnRecord>> {
        let sql = turn_select!("WHERE id = $1");
        let row = sqlx::query(sql)
            .bind(to_i64(turn.0))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(turn_from_row).transpose()?.flatten())
    }

    async fn open_turns(&self, session: Option<&SessionKey>) -> Result<Vec<TurnRecord>> {
        let sql = turn_select!(
            "WHERE status IN ('pending', 'running') AND ($1::TEXT IS NULL OR session_key = $1)
             ORDER BY id"
        );
        let rows = sqlx::query(sql)
            .bind(session.map(SessionKey::as_str))
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        let mut unreadable = Vec::new();
        for row in &rows {
            match turn_from_row(row) {
                Ok(turn) => out.extend(turn),
                // One turn this version cannot read (written by a newer
                // Flynn, or damaged) must not hold up the others: it is
                // marked failed and left out.
                Err(Error::CorruptTurn { turn, source }) => {
                    tracing::error!(%turn, error = %source, "an accepted turn cannot be read; marking it failed");
                    unreadable.push(turn);
                }
                Err(other) => return Err(other),
            }
        }
        for turn in unreadable {
            self.finish_turn(turn, TurnStatus::Failed).await?;
        }
        Ok(out)
    }

    async fn mark_delivered(&self, turn: TurnId) -> Result<()> {
        // One row's update, without the session's lock. Tried again while
        // busy, as the SQLite store tries again to fold its marks in.
        retry::on_busy(|| async {
            sqlx::query(
                "UPDATE turns SET delivered_at = $2 WHERE id = $1 AND delivered_at IS NULL",
            )
            .bind(to_i64(turn.0))
            .bind(now_millis())
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    async fn undelivered_turns(&self, since: i64) -> Result<Vec<TurnRecord>> {
        let sql = turn_select!(
            "WHERE delivered_at IS NULL AND external_id IS NOT NULL AND updated_at >= $1
                AND status NOT IN ('pending', 'running')
             ORDER BY id"
        );
        let rows = sqlx::query(sql).bind(since).fetch_all(&self.pool).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            match turn_from_row(row) {
                Ok(turn) => out.extend(turn),
                Err(Error::CorruptTurn { turn, source }) => {
                    tracing::error!(%turn, error = %source, "a finished turn cannot be read; its answer is not sent again");
                }
                Err(other) => return Err(other),
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl UsageLog for PgStore {
    async fn record_usage(&self, record: &UsageRecord) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        insert_usage(&mut conn, record, now_millis()).await
    }

    async fn usage_by_tier(
        &self,
        session: Option<&SessionKey>,
    ) -> Result<Vec<(Tier, crate::UsageTotal)>> {
        let mut totals: Vec<(Tier, crate::UsageTotal)> = Vec::new();
        for line in self.usage_by_purpose(session).await? {
            match totals.last_mut() {
                Some((tier, total)) if *tier == line.tier => total.add(&line.total),
                _ => totals.push((line.tier, line.total)),
            }
        }
        Ok(totals)
    }

    async fn usage_by_day(&self, since: i64) -> Result<Vec<DayUsage>> {
        // The day as SQLite's strftime gives it: whole seconds (truncated
        // toward zero), in UTC.
        let rows = sqlx::query(concat!(
            "SELECT to_char(to_timestamp(created_at / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')
                 COLLATE \"C\" AS day, tier, ",
            usage_sums!(),
            " FROM usage WHERE created_at >= $1
             GROUP BY day, tier ORDER BY day, tier"
        ))
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        let mut days = Vec::with_capacity(rows.len());
        for row in &rows {
            let day: String = row.try_get("day")?;
            let tier: String = row.try_get("tier")?;
            let Ok(tier) = tier.parse::<Tier>() else {
                continue;
            };
            days.push(DayUsage {
                day,
                tier,
                total: usage_total(row)?,
            });
        }
        Ok(days)
    }

    async fn usage_by_purpose(&self, session: Option<&SessionKey>) -> Result<Vec<UsageLine>> {
        let rows = sqlx::query(concat!(
            "SELECT tier, purpose, ",
            usage_sums!(),
            " FROM usage WHERE $1::TEXT IS NULL OR session_key = $1
             GROUP BY tier, purpose"
        ))
        .bind(session.map(SessionKey::as_str))
        .fetch_all(&self.pool)
        .await?;
        let mut lines = Vec::with_capacity(rows.len());
        for row in &rows {
            let tier: String = row.try_get("tier")?;
            let purpose: String = row.try_get("purpose")?;
            // Rows are written from `as_str`; anything else is skipped.
            let (Ok(tier), Some(purpose)) = (tier.parse::<Tier>(), Purpose::parse(&purpose)) else {
                continue;
            };
            lines.push(UsageLine {
                tier,
                purpose,
                total: usage_total(row)?,
            });
        }
        lines.sort_by_key(|line| (line.tier, line.purpose));
        Ok(lines)
    }
}

#[async_trait]
impl Pairing for PgStore {
    async fn peer_owner(&self, channel: &str, sender: &str) -> Result<bool> {
        let found: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM channel_peers WHERE channel = $1 AND sender = $2 AND owner",
        )
        .bind(channel)
        .bind(sender)
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    async fn set_peer_owner(&self, channel: &str, sender: &str, owner: bool) -> Result<bool> {
        let done =
            sqlx::query("UPDATE channel_peers SET owner = $3 WHERE channel = $1 AND sender = $2")
                .bind(channel)
                .bind(sender)
                .bind(owner)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn peer_approved(&self, channel: &str, sender: &str) -> Result<bool> {
        let found: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM channel_peers WHERE channel = $1 AND sender = $2")
                .bind(channel)
                .bind(sender)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    async fn pairing_request(
        &self,
        channel: &str,
        sender: &str,
        name: Option<&str>,
        now: i64,
        ttl_ms: i64,
    ) -> Result<PairingTicket> {
        self.pairing_request_with(channel, sender, name, now, ttl_ms, &mut new_code)
            .await
    }

    async fn pairing_approve(
        &self,
        channel: &str,
        code: &str,
        now: i64,
    ) -> Result<Result<ApprovedPeer, PairingError>> {
        let code = normalize_code(code);
        let mut tx = self.pool.begin().await?;
        let result = async {
            // Two approvals of one code: the second waits for the first's
            // row lock, then finds the code gone.
            let pending: Option<(String, Option<String>, i64)> = sqlx::query_as(
                "DELETE FROM pairing_codes WHERE channel = $1 AND code = $2
                 RETURNING sender, name, expires_at",
            )
            .bind(channel)
            .bind(&code)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((sender, name, expires_at)) = pending else {
                return Ok(Err(PairingError::Unknown {
                    channel: channel.to_owned(),
                    code: code.clone(),
                }));
            };
            if expires_at <= now {
                return Ok(Err(PairingError::Expired {
                    channel: channel.to_owned(),
                    code: code.clone(),
                }));
            }
            sqlx::query(
                "INSERT INTO channel_peers (channel, sender, name, approved_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (channel, sender) DO UPDATE SET name = excluded.name,
                     approved_at = excluded.approved_at",
            )
            .bind(channel)
            .bind(&sender)
            .bind(&name)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            Ok(Ok(ApprovedPeer {
                channel: channel.to_owned(),
                sender,
                name,
                approved_at: now,
                owner: false,
            }))
        }
        .await;
        settle(tx, result).await
    }

    async fn pairing_pending(&self, now: i64) -> Result<Vec<PendingPairing>> {
        let rows: Vec<(String, String, String, Option<String>, i64, i64)> = sqlx::query_as(
            "SELECT channel, code, sender, name, created_at, expires_at FROM pairing_codes
             WHERE expires_at > $1 ORDER BY created_at, channel, code",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(channel, code, sender, name, created_at, expires_at)| PendingPairing {
                    channel,
                    sender,
                    name,
                    code,
                    created_at,
                    expires_at,
                },
            )
            .collect())
    }

    async fn approved_peers(&self) -> Result<Vec<ApprovedPeer>> {
        let rows: Vec<(String, String, Option<String>, i64, bool)> = sqlx::query_as(
            "SELECT channel, sender, name, approved_at, owner FROM channel_peers
             ORDER BY channel, approved_at, sender",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(channel, sender, name, approved_at, owner)| ApprovedPeer {
                channel,
                sender,
                name,
                approved_at,
                owner,
            })
            .collect())
    }

    async fn revoke_peer(&self, channel: &str, sender: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM channel_peers WHERE channel = $1 AND sender = $2")
            .bind(channel)
            .bind(sender)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl Jobs for PgStore {
    async fn cron_jobs(&self) -> Result<Vec<StoredCronJob>> {
        let rows = sqlx::query(
            "SELECT name, schedule, timezone, message, agent, session, deliver_to, missed, enabled,
                 created_by, created_at
             FROM cron_jobs ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in &rows {
            let created_by: String = row.try_get("created_by")?;
            // Keys are validated on the way in; a row that no longer
            // parses is skipped, like a session's.
            let Ok(created_by) = SessionKey::from_str(&created_by) else {
                continue;
            };
            let missed: String = row.try_get("missed")?;
            jobs.push(StoredCronJob {
                job: CronJobConfig {
                    name: row.try_get("name")?,
                    schedule: row.try_get("schedule")?,
                    timezone: row.try_get("timezone")?,
                    message: row.try_get("message")?,
                    agent: row.try_get("agent")?,
                    session: row.try_get("session")?,
                    deliver_to: row.try_get("deliver_to")?,
                    missed: missed_from(&missed),
                    enabled: row.try_get("enabled")?,
                },
                created_by,
                created_at: row.try_get("created_at")?,
            });
        }
        Ok(jobs)
    }

    async fn add_cron_job(&self, stored: &StoredCronJob) -> Result<bool> {
        let job = &stored.job;
        let mut tx = self.pool.begin().await?;
        let result = async {
            let inserted = sqlx::query(
                "INSERT INTO cron_jobs (name, schedule, timezone, message, agent, session,
                     deliver_to, missed, enabled, created_by, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(text(&job.name))
            .bind(text(&job.schedule))
            .bind(text(&job.timezone))
            .bind(text(&job.message))
            .bind(opt_text(job.agent.as_deref()))
            .bind(opt_text(job.session.as_deref()))
            .bind(opt_text(job.deliver_to.as_deref()))
            .bind(missed_as_str(job.missed))
            .bind(job.enabled)
            .bind(stored.created_by.as_str())
            .bind(stored.created_at)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Ok(false);
            }
            // A job of the same name removed earlier left nothing behind,
            // but a config job of that name may have: the new job starts
            // afresh.
            sqlx::query(
                "INSERT INTO automation_runs (kind, name, since) VALUES ('cron', $1, $2)
                 ON CONFLICT (kind, name) DO UPDATE SET since = excluded.since,
                     scheduled_for = NULL, started_at = NULL, finished_at = NULL,
                     outcome = NULL, error = NULL, session_key = NULL, turn_id = NULL",
            )
            .bind(text(&job.name))
            .bind(stored.created_at)
            .execute(&mut *tx)
            .await?;
            Ok(true)
        }
        .await;
        settle(tx, result).await
    }

    async fn remove_cron_job(&self, name: &str) -> Result<bool> {
        let name = text(name);
        let mut tx = self.pool.begin().await?;
        let result = async {
            let removed = sqlx::query("DELETE FROM cron_jobs WHERE name = $1")
                .bind(&name)
                .execute(&mut *tx)
                .await?;
            if removed.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query("DELETE FROM automation_runs WHERE kind = 'cron' AND name = $1")
                .bind(&name)
                .execute(&mut *tx)
                .await?;
            Ok(true)
        }
        .await;
        settle(tx, result).await
    }

    async fn job_runs(&self) -> Result<Vec<JobRuns>> {
        let sql = runs_select!("ORDER BY kind, name");
        let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.extend(runs_from_row(row)?);
        }
        Ok(out)
    }

    async fn track_job(&self, kind: JobKind, name: &str, since: i64) -> Result<JobRuns> {
        let name = text(name);
        let mut tx = self.pool.begin().await?;
        let result = async {
            sqlx::query(
                "INSERT INTO automation_runs (kind, name, since) VALUES ($1, $2, $3)
                 ON CONFLICT (kind, name) DO NOTHING",
            )
            .bind(kind.as_str())
            .bind(&name)
            .bind(since)
            .execute(&mut *tx)
            .await?;
            let sql = runs_select!("WHERE kind = $1 AND name = $2");
            let row = sqlx::query(sql)
                .bind(kind.as_str())
                .bind(&name)
                .fetch_one(&mut *tx)
                .await?;
            runs_from_row(&row)
        }
        .await;
        settle(tx, result).await?.ok_or_else(|| Error::Backend {
            message: format!(
                "the run record of {} job '{name}' cannot be read",
                kind.as_str()
            ),
        })
    }

    async fn record_run(&self, kind: JobKind, name: &str, run: &LastRun) -> Result<()> {
        sqlx::query(
            "INSERT INTO automation_runs (kind, name, since, scheduled_for, started_at,
                 finished_at, outcome, error, session_key, turn_id)
             VALUES ($1, $2, $4, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (kind, name) DO UPDATE SET scheduled_for = excluded.scheduled_for,
                 started_at = excluded.started_at, finished_at = excluded.finished_at,
                 outcome = excluded.outcome, error = excluded.error,
                 session_key = excluded.session_key, turn_id = excluded.turn_id",
        )
        .bind(kind.as_str())
        .bind(text(name))
        .bind(run.scheduled_for)
        .bind(run.started_at)
        .bind(run.finished_at)
        .bind(run.outcome.as_str())
        .bind(opt_text(run.error.as_deref()))
        .bind(run.session.as_ref().map(SessionKey::as_str))
        .bind(run.turn.map(|t| to_i64(t.0)))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn job_cursor(&self, kind: JobKind, name: &str) -> Result<Option<String>> {
        let cursor: Option<Option<String>> =
            sqlx::query_scalar("SELECT cursor FROM automation_runs WHERE kind = $1 AND name = $2")
                .bind(kind.as_str())
                .bind(text(name))
                .fetch_optional(&self.pool)
                .await?;
        Ok(cursor.flatten())
    }

    async fn set_job_cursor(
        &self,
        kind: JobKind,
        name: &str,
        cursor: &str,
        now: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO automation_runs (kind, name, since, cursor) VALUES ($1, $2, $3, $4)
             ON CONFLICT (kind, name) DO UPDATE SET cursor = excluded.cursor",
        )
        .bind(kind.as_str())
        .bind(text(name))
        .bind(now)
        .bind(text(cursor))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[async_trait]
impl Files for PgStore {
    async fn keep_file(
        &self,
        session: &SessionKey,
        turn: Option<TurnId>,
        file: &MediaFile,
        data: &[u8],
    ) -> Result<()> {
        // Under the session's lock: the session it creates, if needed, must
        // not be deleted by a reset half-way.
        let mut tx = self.begin_for(session).await?;
        let result = async {
            let now = now_millis();
            sqlx::query(
                "INSERT INTO sessions (key, created_at, updated_at) VALUES ($1, $2, $2)
                 ON CONFLICT (key) DO NOTHING",
            )
            .bind(session.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO files (id, session_key, turn_id, name, media_type, kind, caption,
                     size, data, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(text(&file.id))
            .bind(session.as_str())
            .bind(turn.map(|t| to_i64(t.0)))
            .bind(text(&file.name))
            .bind(text(&file.media_type))
            .bind(file.kind.as_str())
            .bind(opt_text(file.caption.as_deref()))
            .bind(to_i64(data.len() as u64))
            .bind(data)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            Ok(())
        }
        .await;
        settle(tx, result).await
    }

    async fn file(&self, id: &str) -> Result<Option<(StoredFile, Vec<u8>)>> {
        let row = sqlx::query(
            "SELECT id, session_key, turn_id, name, media_type, kind, caption, size, data,
                 created_at, sent_at
             FROM files WHERE id = $1",
        )
        .bind(text(id))
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let data: Vec<u8> = row.try_get("data")?;
        Ok(file_from_row(&row)?.map(|file| (file, data)))
    }

    async fn files_of_turns(
        &self,
        session: &SessionKey,
        turns: &[TurnId],
    ) -> Result<Vec<StoredFile>> {
        if turns.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = turns.iter().map(|t| to_i64(t.0)).collect();
        let rows = sqlx::query(
            "SELECT id, session_key, turn_id, name, media_type, kind, caption, size, created_at,
                 sent_at
             FROM files
             WHERE session_key = $1 AND turn_id = ANY($2)
             ORDER BY created_at, id",
        )
        .bind(session.as_str())
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        files_from_rows(&rows)
    }

    async fn mark_file_sent(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE files SET sent_at = $2 WHERE id = $1 AND sent_at IS NULL")
            .bind(text(id))
            .bind(now_millis())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn unsent_files(&self, since: i64) -> Result<Vec<StoredFile>> {
        let rows = sqlx::query(
            "SELECT f.id, f.session_key, f.turn_id, f.name, f.media_type, f.kind, f.caption,
                 f.size, f.created_at, f.sent_at
             FROM files f JOIN turns t ON t.id = f.turn_id
             WHERE f.sent_at IS NULL AND f.created_at >= $1 AND t.external_id IS NOT NULL
             ORDER BY f.created_at, f.id",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        files_from_rows(&rows)
    }

    async fn prune_files(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM files WHERE created_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

fn files_from_rows(rows: &[sqlx::postgres::PgRow]) -> Result<Vec<StoredFile>> {
    let mut files = Vec::with_capacity(rows.len());
    for row in rows {
        files.extend(file_from_row(row)?);
    }
    Ok(files)
}
