use std::path::{Path, PathBuf};
use std::str::FromStr;

use async_trait::async_trait;
use flynn_protocol::config::{CronJobConfig, ModelRef, VoiceReply};
use flynn_protocol::{
    ContentBlock, MediaFile, Message, Purpose, Role, SessionKey, Tier, TurnId, Usage,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row, Sqlite};

use crate::automation::{JobKind, JobRuns, LastRun, StoredCronJob, missed_as_str, missed_from};
use crate::codec::{Encoded, encode, status_from, to_i64, to_u64};
use crate::delivered::DeliveredLog;
use crate::pairing::{
    ApprovedPeer, CODE_ATTEMPTS, MAX_PENDING, PairingError, PairingTicket, PendingPairing,
    new_code, normalize_code,
};
use crate::reads::Reads;
use crate::recent::{Kept, Newer, Recent};
use crate::retry;
use crate::writer::Writer;
use crate::{
    Conversations, DayUsage, Error, Files, Jobs, Pairing, Result, SessionInfo, SessionMeta,
    StoredFile, StoredMessage, ToolOutput, TurnOrigin, TurnRecord, TurnStatus, Turns, UsageLine,
    UsageLog, UsageRecord, UsageTotal,
};
use flynn_protocol::clock::now_millis;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

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

/// Creates `dir` (its missing parents as usual) as a directory only its
/// owner may enter, unless it exists.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        other => other,
    }
}

/// Creates the database file and its WAL companions 0600 where missing,
/// and takes group and other permissions off existing ones.
#[cfg(unix)]
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    // Something that is not a file (a directory, say) is left for SQLite
    // to refuse, with nothing created beside it.
    if std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return Ok(());
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let name = PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&name)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mode = std::fs::metadata(&name)?.permissions().mode();
                if mode & 0o077 != 0 {
                    std::fs::set_permissions(
                        &name,
                        std::fs::Permissions::from_mode(mode & 0o7700),
                    )?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Refuses a database SQLite could open only for reading (a read-only
/// file, directory or file system: SQLite then opens it read-only without
/// a word), which would start and then refuse every message: a table is
/// created in a transaction that is rolled back (in WAL mode a read-only
/// file still lets a write transaction begin; its first write fails).
async fn refuse_read_only(conn: &mut SqliteConnection, location: &str) -> Result<()> {
    let read_only = |message: String| Error::Open {
        location: location.to_owned(),
        message: format!(
            "it can only be read ({message}): the file, its directory or its file system is read-only; make them writable for the user running Flynn, or point sessions.database at a writable place"
        ),
    };
    let probe = async {
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let written = sqlx::query("CREATE TABLE flynn_write_probe (x)")
            .execute(&mut *tx)
            .await;
        tx.rollback().await?;
        written.map(|_| ())
    };
    match probe.await.map_err(Error::from) {
        Err(Error::ReadOnly { message }) => Err(read_only(message)),
        // Anything else (another writer holding the file past the busy
        // timeout, say) is for the steps after this one to meet.
        _ => Ok(()),
    }
}

/// Sessions in a SQLite file (WAL mode, foreign keys on).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Connections for reads (and the few transactions outside the
    /// writer); see [`crate::reads`].
    reads: std::sync::Arc<Reads>,
    path: PathBuf,
    /// The outbox's marks (see [`crate::delivered`]).
    delivered: std::sync::Arc<DeliveredLog>,
    /// The writes of turns, committed in groups (see [`crate::writer`]).
    writer: std::sync::Arc<Writer>,
    /// Histories read lately (see [`crate::recent`]).
    recent: std::sync::Arc<Recent>,
}

/// `PRAGMA cache_size` of each pooled connection: 512 KiB (negative:
/// kibibytes).
const CACHE_KIB: &str = "-512";

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its
    /// schema up to date; a current database is left as it is.
    ///
    /// The database holds every conversation, so it is private to the
    /// user running Flynn: a directory it creates for it is 0700, and the
    /// file and its WAL companions (`-wal`, `-shm`) are created 0600 before
    /// SQLite opens them (SQLite gives the companions the database's mode)
    /// or narrowed to the owner when they exist.
    pub async fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir(dir).map_err(|source| Error::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let location = path.display().to_string();
        make_private(path).map_err(|e| Error::Open {
            location: location.clone(),
            message: if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem {
                "the file system holding it is read-only; remount it read-write or point sessions.database at a writable place".to_owned()
            } else {
                format!("cannot make it readable by this user only: {e}")
            },
        })?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk when it returns, so a message
            // acknowledged to its platform survives a power cut (NORMAL
            // leaves WAL commits unsynced until the next checkpoint).
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(retry::BUSY_TIMEOUT)
            // SQLite's own page cache, per connection. Its default, 2 MiB,
            // is 8 MiB over four read connections, and fills slowly as the file grows:
            // resident memory rose by about 200 bytes per message for as
            // long as the soak ran. A turn touches a few dozen pages; the
            // kernel's page cache keeps the rest of the file a read away.
            .pragma("cache_size", CACHE_KIB);
        // The writer's connection is opened first, here: it checks that
        // the file can be written and brings the schema up to date, then
        // goes to the writer's thread. Read connections are opened as
        // reads come (see `crate::reads`), so a command that runs one turn
        // opens two connections: this one and one to read.
        let mut conn = SqliteConnection::connect_with(&options)
            .await
            .map_err(|e| {
                if crate::error::is_damage(&e) {
                    Error::Damaged {
                        location: location.clone(),
                        message: e.to_string(),
                    }
                } else {
                    Error::Open {
                        location: location.clone(),
                        message: e.to_string(),
                    }
                }
            })?;
        let ready = async {
            refuse_read_only(&mut conn, &location).await?;
            MIGRATOR.run(&mut conn).await.map_err(|e| match &e {
                sqlx::migrate::MigrateError::Execute(inner) if crate::error::is_damage(inner) => {
                    Error::Damaged {
                        location: location.clone(),
                        message: e.to_string(),
                    }
                }
                _ => Error::Migrate {
                    location: location.clone(),
                    message: e.to_string(),
                },
            })
        };
        if let Err(error) = ready.await {
            let _ = conn.close().await;
            return Err(error);
        }
        let writer = Writer::start(options.clone(), Some(conn), &location)?;
        let reads = Reads::new(options);
        Ok(SqliteStore {
            reads: std::sync::Arc::new(reads),
            path: path.to_path_buf(),
            delivered: std::sync::Arc::new(DeliveredLog::beside(path)),
            writer: std::sync::Arc::new(writer),
            recent: std::sync::Arc::default(),
        })
    }

    /// Moves the outbox's marks from their file into the database.
    pub(crate) async fn fold_delivered(&self) -> Result<()> {
        let location = self.delivered.path().display().to_string();
        self.delivered
            .fold(|turns| async move {
                retry::on_busy(|| async {
                    let now = now_millis();
                    let mut conn = self.reads.acquire().await?;
                    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                    for turn in &turns {
                        sqlx::query(
                            "UPDATE turns SET delivered_at = ?2 WHERE id = ?1 AND delivered_at IS NULL",
                        )
                        .bind(to_i64(turn.0))
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    Ok(())
                })
                .await
            })
            .await
            .map_err(|e| match e {
                Error::Backend { message } => Error::Backend {
                    message: format!("{location}: {message}"),
                },
                other => other,
            })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a consistent copy of the whole database to `dest` (which
    /// must not exist) while the store stays in use: SQLite's `VACUUM
    /// INTO`, one read transaction, so writers go on and the copy holds
    /// every commit before it began and none after. The copy is a plain
    /// database (no WAL), compacted; it is created 0600.
    pub async fn snapshot(&self, dest: &Path) -> Result<()> {
        self.fold_delivered().await?;
        let text = dest.to_str().ok_or_else(|| Error::Backend {
            message: format!(
                "cannot copy the session database to {}: the path is not UTF-8",
                dest.display()
            ),
        })?;
        sqlx::query("VACUUM INTO ?1")
            .bind(text)
            .execute(&mut *self.reads.acquire().await?)
            .await?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o600)).map_err(
                |e| Error::Backend {
                    message: format!("cannot make {} private: {e}", dest.display()),
                },
            )?;
        }
        Ok(())
    }

    /// SQLite's `PRAGMA quick_check`: the problems found in the file
    /// (damaged pages, broken indexes, ...), none when it is sound. It
    /// reads every page, so it takes a moment on a large database.
    pub async fn quick_check(&self) -> Result<Vec<String>> {
        let lines: Vec<String> = sqlx::query_scalar("PRAGMA quick_check")
            .fetch_all(&mut *self.reads.acquire().await?)
            .await
            .map_err(|e| {
                if crate::error::is_damage(&e) {
                    Error::Damaged {
                        location: self.path.display().to_string(),
                        message: e.to_string(),
                    }
                } else {
                    e.into()
                }
            })?;
        Ok(lines.into_iter().filter(|line| line != "ok").collect())
    }

    /// How many transactions the store's writer has committed: the writes
    /// of turns that came together share one (see [`crate::writer`]).
    pub fn write_commits(&self) -> u64 {
        self.writer.commits()
    }

    /// Closes every connection, checkpointing the WAL.
    pub async fn close(&self) {
        self.writer.close().await;
        self.reads.close().await;
    }

    /// Creates the session if needed and stamps it as the most recently
    /// updated one: `updated_at` is the wall clock, but always after every
    /// other session's (by a millisecond when writes come faster than the
    /// clock ticks), so `list` shows the true order of changes.
    async fn touch(conn: &mut SqliteConnection, key: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at)
             SELECT ?1, stamp, stamp
             FROM (SELECT MAX(?2, COALESCE((SELECT MAX(updated_at) FROM sessions), 0) + 1) AS stamp)
             WHERE true
             ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at",
        )
        .bind(key)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// Appends messages, marked as `turn`'s when given, in one transaction
    /// (tried again while the database is busy).
    async fn append_as(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        messages: &[Message],
    ) -> Result<Vec<u64>> {
        retry::on_busy(|| self.append_once(key, turn, messages)).await
    }

    async fn append_once(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        messages: &[Message],
    ) -> Result<Vec<u64>> {
        let key = key.as_str().to_owned();
        let messages = Encoded::all(messages)?;
        self.writer
            .write(move |conn| {
                Box::pin(
                    async move { Self::insert(conn, &key, turn, &messages, now_millis()).await },
                )
            })
            .await
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
        let key = key.as_str().to_owned();
        let messages = Encoded::all(std::slice::from_ref(message))?;
        let usage = usage.clone();
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let now = now_millis();
                    let seqs = Self::insert(conn, &key, turn, &messages, now).await?;
                    insert_usage(conn, &usage, now).await?;
                    if let Some(turn) = turn.filter(|_| completes) {
                        // No row: the turn is gone (its session was
                        // cleared); the answer stays all the same.
                        sqlx::query("UPDATE turns SET status = ?2, updated_at = ?3 WHERE id = ?1")
                            .bind(to_i64(turn.0))
                            .bind(TurnStatus::Completed.as_str())
                            .bind(now)
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(seqs.first().copied().unwrap_or_default())
                })
            })
            .await
    }

    /// Accepts a message as a pending turn or, with `start`, as a running
    /// one whose message is in the history (`accept_and_start`): one
    /// write either way.
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
        let session = key.clone();
        let written = origin.clone();
        let (id, message_seq) = self
            .writer
            .write(move |conn| {
                Box::pin(async move {
                    let message = start.then(|| Encoded {
                        role: Role::User.as_str(),
                        content: encoded.clone(),
                    });
                    let id = Self::accept_in(conn, &session, encoded, title, &written, now).await?;
                    let Some(message) = message else {
                        return Ok((id, None));
                    };
                    let seqs =
                        Self::insert(conn, session.as_str(), Some(id), &[message], now).await?;
                    let seq = seqs.first().copied().unwrap_or_default();
                    sqlx::query(
                        "UPDATE turns SET status = 'running', message_seq = ?2 WHERE id = ?1",
                    )
                    .bind(to_i64(id.0))
                    .bind(to_i64(seq))
                    .execute(&mut *conn)
                    .await?;
                    Ok((id, Some(seq)))
                })
            })
            .await?;
        Ok(TurnRecord {
            id,
            session: key.clone(),
            status: if start {
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

    /// Stores a pending turn with its message, refusing one whose
    /// platform id the session has already.
    async fn accept_in(
        conn: &mut SqliteConnection,
        key: &SessionKey,
        encoded: String,
        title: Option<String>,
        origin: &TurnOrigin,
        now: i64,
    ) -> Result<TurnId> {
        if let Some(external_id) = &origin.external_id {
            let seen: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM turns WHERE session_key = ?1 AND external_id = ?2",
            )
            .bind(key.as_str())
            .bind(external_id)
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(turn) = seen {
                return Err(Error::Duplicate {
                    session: key.to_string(),
                    external_id: external_id.clone(),
                    turn: TurnId(to_u64(turn)),
                });
            }
        }
        // `touch`, also recording the channel and giving an untitled
        // session its title, in one statement.
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, last_channel, title)
             SELECT ?1, stamp, stamp, ?3, ?4
             FROM (SELECT MAX(?2, COALESCE((SELECT MAX(updated_at) FROM sessions), 0) + 1) AS stamp)
             WHERE true
             ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at,
                 last_channel = excluded.last_channel,
                 title = COALESCE(sessions.title, excluded.title)",
        )
        .bind(key.as_str())
        .bind(now)
        .bind(key.channel())
        .bind(title)
        .execute(&mut *conn)
        .await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO turns (session_key, status, content, agent, owner_pid, created_at, updated_at,
                 external_id, principal)
             VALUES (?1, 'pending', ?2, ?3, ?4, ?5, ?5, ?6, ?7) RETURNING id",
        )
        .bind(key.as_str())
        .bind(encoded)
        .bind(&origin.agent)
        .bind(i64::from(origin.owner_pid))
        .bind(now)
        .bind(&origin.external_id)
        .bind(origin.principal.to_string())
        .fetch_one(&mut *conn)
        .await?;
        Ok(TurnId(to_u64(id)))
    }

    async fn start_turn_once(&self, turn: TurnId, owner_pid: u32) -> Result<u64> {
        self.writer
            .write(move |conn| Box::pin(Self::start_turn_in(conn, turn, owner_pid)))
            .await
    }

    /// Marks `turn` running and puts its message in the history (once: a
    /// turn started again after a crash keeps the message it has).
    async fn start_turn_in(
        conn: &mut SqliteConnection,
        turn: TurnId,
        owner_pid: u32,
    ) -> Result<u64> {
        let now = now_millis();
        let row = sqlx::query(
            "SELECT session_key, status, message_seq, content FROM turns WHERE id = ?1",
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
                let seqs = Self::insert(conn, &key, Some(turn), &[message], now).await?;
                seqs.first().copied().unwrap_or_default()
            }
            (status, _) => {
                return Err(Error::TurnFinished { turn, status });
            }
        };
        sqlx::query(
            "UPDATE turns SET status = 'running', message_seq = ?2, owner_pid = ?3, updated_at = ?4
             WHERE id = ?1",
        )
        .bind(to_i64(turn.0))
        .bind(to_i64(seq))
        .bind(i64::from(owner_pid))
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(seq)
    }

    async fn finish_turn_once(&self, turn: TurnId, status: TurnStatus) -> Result<()> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let done =
                        sqlx::query("UPDATE turns SET status = ?2, updated_at = ?3 WHERE id = ?1")
                            .bind(to_i64(turn.0))
                            .bind(status.as_str())
                            .bind(now_millis())
                            .execute(&mut *conn)
                            .await?;
                    if done.rows_affected() == 0 {
                        return Err(Error::UnknownTurn { turn });
                    }
                    Ok(())
                })
            })
            .await
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
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("DELETE FROM pairing_codes WHERE expires_at <= ?1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let pending: Option<(String, i64)> = sqlx::query_as(
            "SELECT code, expires_at FROM pairing_codes WHERE channel = ?1 AND sender = ?2",
        )
        .bind(channel)
        .bind(sender)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((code, expires_at)) = pending {
            tx.commit().await?;
            return Ok(PairingTicket {
                code,
                fresh: false,
                expires_at,
            });
        }
        // A full channel refuses new codes; the ones given keep waiting
        // (a flood of accounts must not push out a real request).
        let (pending, frees_at): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), MIN(expires_at) FROM pairing_codes WHERE channel = ?1",
        )
        .bind(channel)
        .fetch_one(&mut *tx)
        .await?;
        let pending = usize::try_from(pending).unwrap_or(usize::MAX);
        if pending >= MAX_PENDING {
            tx.commit().await?;
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
        let mut code = None;
        for _ in 0..CODE_ATTEMPTS {
            let fresh = codes().map_err(|e| {
                no_code(format!("the operating system's random source failed ({e})"))
            })?;
            let inserted = sqlx::query(
                "INSERT INTO pairing_codes (channel, code, sender, name, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            )
            .bind(channel)
            .bind(&fresh)
            .bind(sender)
            .bind(name)
            .bind(now)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 1 {
                code = Some(fresh);
                break;
            }
        }
        let Some(code) = code else {
            return Err(no_code(format!(
                "the {CODE_ATTEMPTS} codes tried were all taken"
            )));
        };
        tx.commit().await?;
        Ok(PairingTicket {
            code,
            fresh: true,
            expires_at,
        })
    }

    /// Inserts messages at the end of the session (position = sequence).
    /// Nothing to insert changes nothing.
    async fn insert(
        conn: &mut SqliteConnection,
        key: &str,
        turn: Option<TurnId>,
        messages: &[Encoded],
        now: i64,
    ) -> Result<Vec<u64>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        Self::touch(conn, key, now).await?;
        let mut seqs = Vec::with_capacity(messages.len());
        for message in messages {
            // Position = sequence, so appends sort last. Inside this write
            // transaction the next AUTOINCREMENT number is known: one above
            // the larger of the table's counter and its largest number. Any
            // position above every stored sequence is free, because no
            // message's position exceeds its own sequence (appends are
            // equal, compaction puts new numbers at old positions).
            let (seq, pos): (i64, i64) = sqlx::query_as(
                "INSERT INTO messages (session_key, pos, turn_id, role, content, created_at)
                 VALUES (?1, MAX(
                     COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0),
                     COALESCE((SELECT MAX(seq) FROM messages), 0)) + 1, ?2, ?3, ?4, ?5)
                 RETURNING seq, pos",
            )
            .bind(key)
            .bind(turn.map(|t| to_i64(t.0)))
            .bind(message.role)
            .bind(message.content.as_str())
            .bind(now)
            .fetch_one(&mut *conn)
            .await?;
            if pos != seq {
                sqlx::query("UPDATE messages SET pos = seq WHERE seq = ?1")
                    .bind(seq)
                    .execute(&mut *conn)
                    .await?;
            }
            seqs.push(to_u64(seq));
        }
        Ok(seqs)
    }

    /// `kept` with the messages stored since it was read, or `None` when
    /// the history changed otherwise (compacted, cleared) and must be read
    /// whole.
    async fn brought_up_to_date(&self, key: &SessionKey, kept: Kept) -> Result<Option<Kept>> {
        // One statement: the session's count, then the newer rows, if
        // any, each beside it (a row of NULLs when there are none).
        let rows = sqlx::query(
            "SELECT c.total, m.seq, m.pos, m.turn_id, m.role, m.content, m.created_at,
                (SELECT principal FROM turns WHERE turns.id = m.turn_id) AS principal
             FROM (SELECT COUNT(*) AS total FROM messages WHERE session_key = ?1) AS c
             LEFT JOIN messages AS m ON m.session_key = ?1 AND m.seq > ?2
             ORDER BY m.pos",
        )
        .bind(key.as_str())
        .bind(to_i64(kept.last_seq()))
        .fetch_all(&mut *self.reads.acquire().await?)
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
        query: sqlx::query::Query<'_, Sqlite, sqlx::sqlite::SqliteArguments>,
    ) -> Result<Vec<StoredMessage>> {
        let rows = query.fetch_all(&mut *self.reads.acquire().await?).await?;
        rows.iter().map(|row| stored_from_row(key, row)).collect()
    }
}

/// The bytes of a message row's stored JSON.
fn content_len(row: &SqliteRow) -> usize {
    row.try_get::<&str, _>("content").map_or(0, str::len)
}

crate::codec::row_decoders!(sqlx::sqlite::SqliteRow);

#[async_trait]
impl Conversations for SqliteStore {
    async fn close(&self) {
        SqliteStore::close(self).await;
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
                let sql = message_select!("WHERE session_key = ?1 ORDER BY pos");
                let rows = sqlx::query(sql)
                    .bind(key.as_str())
                    .fetch_all(&mut *self.reads.acquire().await?)
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
        let sql = message_select!("WHERE session_key = ?1 AND seq > ?2 AND pos = seq ORDER BY pos");
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
                    "SELECT pos FROM messages WHERE session_key = ?1 AND seq = ?2",
                )
                .bind(key.as_str())
                .bind(to_i64(before))
                .fetch_optional(&mut *self.reads.acquire().await?)
                .await?;
                let Some(pos) = pos else {
                    return Err(Error::UnknownMessage {
                        session: key.to_string(),
                        seq: before,
                    });
                };
                let sql = message_select!(
                    "WHERE session_key = ?1 AND pos < ?2 ORDER BY pos DESC LIMIT ?3"
                );
                self.read_messages(
                    key,
                    sqlx::query(sql).bind(key.as_str()).bind(pos).bind(limit),
                )
                .await?
            }
            None => {
                let sql = message_select!("WHERE session_key = ?1 ORDER BY pos DESC LIMIT ?2");
                self.read_messages(key, sqlx::query(sql).bind(key.as_str()).bind(limit))
                    .await?
            }
        };
        page.reverse();
        Ok(page)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>> {
        let rows = sqlx::query(info_select!("ORDER BY s.updated_at DESC, s.key"))
            .fetch_all(&mut *self.reads.acquire().await?)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.extend(info_from_row(row)?);
        }
        Ok(out)
    }

    async fn info(&self, key: &SessionKey) -> Result<Option<SessionInfo>> {
        let row = sqlx::query(info_select!("WHERE s.key = ?1"))
            .bind(key.as_str())
            .fetch_optional(&mut *self.reads.acquire().await?)
            .await?;
        match row {
            Some(row) => info_from_row(&row),
            None => Ok(None),
        }
    }

    async fn clear(&self, key: &SessionKey) -> Result<bool> {
        let done = sqlx::query("DELETE FROM sessions WHERE key = ?1")
            .bind(key.as_str())
            .execute(&mut *self.reads.acquire().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn replace_history(
        &self,
        key: &SessionKey,
        upto: u64,
        replacement: &[Message],
    ) -> Result<Vec<u64>> {
        let now = now_millis();
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let pos: Option<i64> =
            sqlx::query_scalar("SELECT pos FROM messages WHERE session_key = ?1 AND seq = ?2")
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
        sqlx::query("DELETE FROM messages WHERE session_key = ?1 AND pos <= ?2")
            .bind(key.as_str())
            .bind(pos)
            .execute(&mut *tx)
            .await?;
        Self::touch(&mut tx, key.as_str(), now).await?;
        // The replacement takes the positions just freed, ending at `pos`,
        // so what was appended after `upto` stays after it.
        let count = i64::try_from(replacement.len()).unwrap_or(i64::MAX);
        let mut seqs = Vec::with_capacity(replacement.len());
        for (i, message) in (0_i64..).zip(replacement) {
            let seq: i64 = sqlx::query_scalar(
                "INSERT INTO messages (session_key, pos, turn_id, role, content, created_at)
                 VALUES (?1, ?2, NULL, ?3, ?4, ?5) RETURNING seq",
            )
            .bind(key.as_str())
            .bind(pos - count + 1 + i)
            .bind(message.role.as_str())
            .bind(encode(&message.content)?)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            seqs.push(to_u64(seq));
        }
        tx.commit().await?;
        Ok(seqs)
    }

    async fn metadata(&self, key: &SessionKey) -> Result<SessionMeta> {
        let row = sqlx::query(
            "SELECT agent, tier, model, title, last_channel, taint, voice FROM sessions WHERE key = ?1",
        )
        .bind(key.as_str())
        .fetch_optional(&mut *self.reads.acquire().await?)
        .await?;
        match row {
            Some(row) => meta_from_row(&row),
            None => Ok(SessionMeta::default()),
        }
    }

    async fn set_metadata(&self, key: &SessionKey, meta: &SessionMeta) -> Result<()> {
        let now = now_millis();
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        Self::touch(&mut tx, key.as_str(), now).await?;
        sqlx::query(
            "UPDATE sessions SET agent = ?2, tier = ?3, model = ?4, title = ?5, last_channel = ?6,
                 voice = ?7
             WHERE key = ?1",
        )
        .bind(key.as_str())
        .bind(meta.agent.as_deref())
        .bind(meta.tier.map(Tier::as_str))
        .bind(meta.model.as_ref().map(ModelRef::to_string))
        .bind(meta.title.as_deref())
        .bind(meta.last_channel.as_deref())
        .bind(meta.voice.map(VoiceReply::as_str))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn set_taint(&self, key: &SessionKey, taint: Option<&str>) -> Result<()> {
        let key = key.as_str().to_owned();
        let taint = taint.map(str::to_owned);
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    Self::touch(conn, &key, now_millis()).await?;
                    sqlx::query("UPDATE sessions SET taint = ?2 WHERE key = ?1")
                        .bind(&key)
                        .bind(taint)
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn put_tool_output(&self, key: &SessionKey, output: &ToolOutput) -> Result<()> {
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let now = now_millis();
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at) VALUES (?1, ?2, ?2)
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(key.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        // A call id already kept keeps its output: a later call that
        // repeats the id (a server numbering its calls afresh in every
        // answer) must not take an earlier call's place. The same output
        // again (a retried write) is fine.
        let inserted = sqlx::query(
            "INSERT INTO tool_outputs (session_key, call_id, tool, content, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (session_key, call_id) DO NOTHING",
        )
        .bind(key.as_str())
        .bind(&output.call_id)
        .bind(&output.tool)
        .bind(&output.content)
        .bind(output.created_at)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            let same: bool = sqlx::query_scalar(
                "SELECT tool = ?3 AND content = ?4 FROM tool_outputs
                 WHERE session_key = ?1 AND call_id = ?2",
            )
            .bind(key.as_str())
            .bind(&output.call_id)
            .bind(&output.tool)
            .bind(&output.content)
            .fetch_one(&mut *tx)
            .await?;
            if !same {
                return Err(Error::ToolOutputTaken {
                    session: key.to_string(),
                    call_id: output.call_id.clone(),
                });
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn tool_output(&self, key: &SessionKey, call_id: &str) -> Result<Option<ToolOutput>> {
        let row = sqlx::query(
            "SELECT call_id, tool, content, created_at FROM tool_outputs
             WHERE session_key = ?1 AND call_id = ?2",
        )
        .bind(key.as_str())
        .bind(call_id)
        .fetch_optional(&mut *self.reads.acquire().await?)
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
            let mut conn = self.reads.acquire().await?;
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
            let keys = sqlx::query_scalar(
                "DELETE FROM sessions WHERE updated_at < ?1 AND NOT EXISTS (
                     SELECT 1 FROM turns t WHERE t.session_key = sessions.key
                         AND t.status IN ('pending', 'running'))
                 RETURNING key",
            )
            .bind(before)
            .fetch_all(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(keys)
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
impl Turns for SqliteStore {
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
        let sql = turn_select!("WHERE id = ?1");
        let row = sqlx::query(sql)
            .bind(to_i64(turn.0))
            .fetch_optional(&mut *self.reads.acquire().await?)
            .await?;
        Ok(row.as_ref().map(turn_from_row).transpose()?.flatten())
    }

    async fn open_turns(&self, session: Option<&SessionKey>) -> Result<Vec<TurnRecord>> {
        let sql = turn_select!(
            "WHERE status IN ('pending', 'running') AND (?1 IS NULL OR session_key = ?1)
             ORDER BY id"
        );
        let rows = sqlx::query(sql)
            .bind(session.map(SessionKey::as_str))
            .fetch_all(&mut *self.reads.acquire().await?)
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
        self.delivered
            .append(turn)
            .await
            .map_err(|e| Error::Backend {
                message: format!(
                    "cannot record that turn {turn}'s answer was sent in {}: {e}",
                    self.delivered.path().display()
                ),
            })
    }

    async fn undelivered_turns(&self, since: i64) -> Result<Vec<TurnRecord>> {
        self.fold_delivered().await?;
        let sql = turn_select!(
            "WHERE delivered_at IS NULL AND external_id IS NOT NULL AND updated_at >= ?1
                AND status NOT IN ('pending', 'running')
             ORDER BY id"
        );
        let rows = sqlx::query(sql)
            .bind(since)
            .fetch_all(&mut *self.reads.acquire().await?)
            .await?;
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
impl UsageLog for SqliteStore {
    async fn record_usage(&self, record: &UsageRecord) -> Result<()> {
        let record = record.clone();
        self.writer
            .write(move |conn| {
                Box::pin(async move { insert_usage(conn, &record, now_millis()).await })
            })
            .await
    }

    async fn usage_by_tier(&self, session: Option<&SessionKey>) -> Result<Vec<(Tier, UsageTotal)>> {
        let mut totals: Vec<(Tier, UsageTotal)> = Vec::new();
        for line in self.usage_by_purpose(session).await? {
            match totals.last_mut() {
                Some((tier, total)) if *tier == line.tier => total.add(&line.total),
                _ => totals.push((line.tier, line.total)),
            }
        }
        Ok(totals)
    }

    async fn usage_by_day(&self, since: i64) -> Result<Vec<DayUsage>> {
        let rows = sqlx::query(
            "SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, tier,
                    COUNT(*) AS calls,
                    SUM(input_tokens) AS input, SUM(output_tokens) AS output,
                    SUM(cache_read_tokens) AS cache_read, SUM(cache_write_tokens) AS cache_write,
                    COALESCE(SUM(cost_usd), 0.0) AS cost,
                    SUM(cost_usd IS NULL) AS unpriced
             FROM usage WHERE created_at >= ?1
             GROUP BY day, tier ORDER BY day, tier",
        )
        .bind(since)
        .fetch_all(&mut *self.reads.acquire().await?)
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
        let rows = sqlx::query(
            "SELECT tier, purpose, COUNT(*) AS calls,
                    SUM(input_tokens) AS input, SUM(output_tokens) AS output,
                    SUM(cache_read_tokens) AS cache_read, SUM(cache_write_tokens) AS cache_write,
                    COALESCE(SUM(cost_usd), 0.0) AS cost,
                    SUM(cost_usd IS NULL) AS unpriced
             FROM usage WHERE ?1 IS NULL OR session_key = ?1
             GROUP BY tier, purpose",
        )
        .bind(session.map(SessionKey::as_str))
        .fetch_all(&mut *self.reads.acquire().await?)
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
impl Pairing for SqliteStore {
    async fn peer_owner(&self, channel: &str, sender: &str) -> Result<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM channel_peers WHERE channel = ?1 AND sender = ?2 AND owner = 1",
        )
        .bind(channel)
        .bind(sender)
        .fetch_optional(&mut *self.reads.acquire().await?)
        .await?;
        Ok(found.is_some())
    }

    async fn set_peer_owner(&self, channel: &str, sender: &str, owner: bool) -> Result<bool> {
        let done =
            sqlx::query("UPDATE channel_peers SET owner = ?3 WHERE channel = ?1 AND sender = ?2")
                .bind(channel)
                .bind(sender)
                .bind(i64::from(owner))
                .execute(&mut *self.reads.acquire().await?)
                .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn peer_approved(&self, channel: &str, sender: &str) -> Result<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM channel_peers WHERE channel = ?1 AND sender = ?2")
                .bind(channel)
                .bind(sender)
                .fetch_optional(&mut *self.reads.acquire().await?)
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
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let pending: Option<(String, Option<String>, i64)> = sqlx::query_as(
            "DELETE FROM pairing_codes WHERE channel = ?1 AND code = ?2
             RETURNING sender, name, expires_at",
        )
        .bind(channel)
        .bind(&code)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((sender, name, expires_at)) = pending else {
            return Ok(Err(PairingError::Unknown {
                channel: channel.to_owned(),
                code,
            }));
        };
        if expires_at <= now {
            tx.commit().await?;
            return Ok(Err(PairingError::Expired {
                channel: channel.to_owned(),
                code,
            }));
        }
        sqlx::query(
            "INSERT INTO channel_peers (channel, sender, name, approved_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (channel, sender) DO UPDATE SET name = excluded.name,
                 approved_at = excluded.approved_at",
        )
        .bind(channel)
        .bind(&sender)
        .bind(&name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(ApprovedPeer {
            channel: channel.to_owned(),
            sender,
            name,
            approved_at: now,
            owner: false,
        }))
    }

    async fn pairing_pending(&self, now: i64) -> Result<Vec<PendingPairing>> {
        let rows: Vec<(String, String, String, Option<String>, i64, i64)> = sqlx::query_as(
            "SELECT channel, code, sender, name, created_at, expires_at FROM pairing_codes
             WHERE expires_at > ?1 ORDER BY created_at, channel, code",
        )
        .bind(now)
        .fetch_all(&mut *self.reads.acquire().await?)
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
        let rows: Vec<(String, String, Option<String>, i64, i64)> = sqlx::query_as(
            "SELECT channel, sender, name, approved_at, owner FROM channel_peers
             ORDER BY channel, approved_at, sender",
        )
        .fetch_all(&mut *self.reads.acquire().await?)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(channel, sender, name, approved_at, owner)| ApprovedPeer {
                channel,
                sender,
                name,
                approved_at,
                owner: owner != 0,
            })
            .collect())
    }

    async fn revoke_peer(&self, channel: &str, sender: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM channel_peers WHERE channel = ?1 AND sender = ?2")
            .bind(channel)
            .bind(sender)
            .execute(&mut *self.reads.acquire().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl Jobs for SqliteStore {
    async fn cron_jobs(&self) -> Result<Vec<StoredCronJob>> {
        let rows = sqlx::query(
            "SELECT name, schedule, timezone, message, agent, session, deliver_to, missed, enabled,
                 created_by, created_at
             FROM cron_jobs ORDER BY name",
        )
        .fetch_all(&mut *self.reads.acquire().await?)
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
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let inserted = sqlx::query(
            "INSERT INTO cron_jobs (name, schedule, timezone, message, agent, session, deliver_to,
                 missed, enabled, created_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&job.name)
        .bind(&job.schedule)
        .bind(&job.timezone)
        .bind(&job.message)
        .bind(&job.agent)
        .bind(&job.session)
        .bind(&job.deliver_to)
        .bind(missed_as_str(job.missed))
        .bind(job.enabled)
        .bind(stored.created_by.as_str())
        .bind(stored.created_at)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Ok(false);
        }
        // A job of the same name removed earlier left nothing behind, but
        // a config job of that name may have: the new job starts afresh.
        sqlx::query(
            "INSERT INTO automation_runs (kind, name, since) VALUES ('cron', ?1, ?2)
             ON CONFLICT (kind, name) DO UPDATE SET since = excluded.since,
                 scheduled_for = NULL, started_at = NULL, finished_at = NULL, outcome = NULL,
                 error = NULL, session_key = NULL, turn_id = NULL",
        )
        .bind(&job.name)
        .bind(stored.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn remove_cron_job(&self, name: &str) -> Result<bool> {
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let removed = sqlx::query("DELETE FROM cron_jobs WHERE name = ?1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if removed.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query("DELETE FROM automation_runs WHERE kind = 'cron' AND name = ?1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn job_runs(&self) -> Result<Vec<JobRuns>> {
        let sql = runs_select!("ORDER BY kind, name");
        let rows = sqlx::query(sql)
            .fetch_all(&mut *self.reads.acquire().await?)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.extend(runs_from_row(row)?);
        }
        Ok(out)
    }

    async fn track_job(&self, kind: JobKind, name: &str, since: i64) -> Result<JobRuns> {
        let mut conn = self.reads.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(
            "INSERT INTO automation_runs (kind, name, since) VALUES (?1, ?2, ?3)
             ON CONFLICT (kind, name) DO NOTHING",
        )
        .bind(kind.as_str())
        .bind(name)
        .bind(since)
        .execute(&mut *tx)
        .await?;
        let sql = runs_select!("WHERE kind = ?1 AND name = ?2");
        let row = sqlx::query(sql)
            .bind(kind.as_str())
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        runs_from_row(&row)?.ok_or_else(|| Error::Backend {
            message: format!(
                "the run record of {} job '{name}' cannot be read",
                kind.as_str()
            ),
        })
    }

    async fn record_run(&self, kind: JobKind, name: &str, run: &LastRun) -> Result<()> {
        sqlx::query(
            "INSERT INTO automation_runs (kind, name, since, scheduled_for, started_at, finished_at,
                 outcome, error, session_key, turn_id)
             VALUES (?1, ?2, ?4, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (kind, name) DO UPDATE SET scheduled_for = excluded.scheduled_for,
                 started_at = excluded.started_at, finished_at = excluded.finished_at,
                 outcome = excluded.outcome, error = excluded.error,
                 session_key = excluded.session_key, turn_id = excluded.turn_id",
        )
        .bind(kind.as_str())
        .bind(name)
        .bind(run.scheduled_for)
        .bind(run.started_at)
        .bind(run.finished_at)
        .bind(run.outcome.as_str())
        .bind(&run.error)
        .bind(run.session.as_ref().map(SessionKey::as_str))
        .bind(run.turn.map(|t| to_i64(t.0)))
        .execute(&mut *self.reads.acquire().await?)
        .await?;
        Ok(())
    }

    async fn job_cursor(&self, kind: JobKind, name: &str) -> Result<Option<String>> {
        let cursor: Option<Option<String>> =
            sqlx::query_scalar("SELECT cursor FROM automation_runs WHERE kind = ?1 AND name = ?2")
                .bind(kind.as_str())
                .bind(name)
                .fetch_optional(&mut *self.reads.acquire().await?)
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
            "INSERT INTO automation_runs (kind, name, since, cursor) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, name) DO UPDATE SET cursor = excluded.cursor",
        )
        .bind(kind.as_str())
        .bind(name)
        .bind(now)
        .bind(cursor)
        .execute(&mut *self.reads.acquire().await?)
        .await?;
        Ok(())
    }
}

#[async_trait]
impl Files for SqliteStore {
    async fn keep_file(
        &self,
        session: &SessionKey,
        turn: Option<TurnId>,
        file: &MediaFile,
        data: &[u8],
    ) -> Result<()> {
        let (key, file, data) = (session.as_str().to_owned(), file.clone(), data.to_vec());
        let turn = turn.map(|t| to_i64(t.0));
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let now = now_millis();
                    sqlx::query(
                        "INSERT INTO sessions (key, created_at, updated_at) VALUES (?1, ?2, ?2)
                         ON CONFLICT (key) DO NOTHING",
                    )
                    .bind(&key)
                    .bind(now)
                    .execute(&mut *conn)
                    .await?;
                    sqlx::query(
                        "INSERT INTO files (id, session_key, turn_id, name, media_type, kind,
                             caption, size, data, created_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    )
                    .bind(&file.id)
                    .bind(&key)
                    .bind(turn)
                    .bind(&file.name)
                    .bind(&file.media_type)
                    .bind(file.kind.as_str())
                    .bind(&file.caption)
                    .bind(to_i64(data.len() as u64))
                    .bind(&data)
                    .bind(now)
                    .execute(&mut *conn)
                    .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn file(&self, id: &str) -> Result<Option<(StoredFile, Vec<u8>)>> {
        let row = sqlx::query(
            "SELECT id, session_key, turn_id, name, media_type, kind, caption, size, data,
                 created_at, sent_at
             FROM files WHERE id = ?1",
        )
        .bind(id)
        .fetch_optional(&mut *self.reads.acquire().await?)
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
        // The ids are numbers: a JSON array bound as one parameter.
        let ids = serde_json::to_string(&turns.iter().map(|t| t.0).collect::<Vec<_>>())
            .unwrap_or_else(|_| "[]".to_owned());
        let rows = sqlx::query(
            "SELECT id, session_key, turn_id, name, media_type, kind, caption, size, created_at,
                 sent_at
             FROM files
             WHERE session_key = ?1 AND turn_id IN (SELECT value FROM json_each(?2))
             ORDER BY created_at, id",
        )
        .bind(session.as_str())
        .bind(ids)
        .fetch_all(&mut *self.reads.acquire().await?)
        .await?;
        files_from_rows(&rows)
    }

    async fn mark_file_sent(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    sqlx::query("UPDATE files SET sent_at = ?2 WHERE id = ?1 AND sent_at IS NULL")
                        .bind(&id)
                        .bind(now_millis())
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn unsent_files(&self, since: i64) -> Result<Vec<StoredFile>> {
        let rows = sqlx::query(
            "SELECT f.id, f.session_key, f.turn_id, f.name, f.media_type, f.kind, f.caption,
                 f.size, f.created_at, f.sent_at
             FROM files f JOIN turns t ON t.id = f.turn_id
             WHERE f.sent_at IS NULL AND f.created_at >= ?1 AND t.external_id IS NOT NULL
             ORDER BY f.created_at, f.id",
        )
        .bind(since)
        .fetch_all(&mut *self.reads.acquire().await?)
        .await?;
        files_from_rows(&rows)
    }

    async fn prune_files(&self, before: i64) -> Result<u64> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let done = sqlx::query("DELETE FROM files WHERE created_at < ?1")
                        .bind(before)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected())
                })
            })
            .await
    }
}

fn files_from_rows(rows: &[SqliteRow]) -> Result<Vec<StoredFile>> {
    let mut files = Vec::with_capacity(rows.len());
    for row in rows {
        files.extend(file_from_row(row)?);
    }
    Ok(files)
}

async fn insert_usage(conn: &mut SqliteConnection, record: &UsageRecord, now: i64) -> Result<()> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO usage (session_key, provider, model, tier, purpose, input_tokens,
             output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at, partial)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )
    .bind(record.session.as_str())
    .bind(&record.provider)
    .bind(&record.model)
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

/// The sums of a usage query's row (`calls`, `input`, `output`,
/// `cache_read`, `cache_write`, `cost`, `unpriced`).
fn usage_total(row: &sqlx::sqlite::SqliteRow) -> Result<UsageTotal> {
    let count = |name: &str| -> Result<u64> { Ok(to_u64(row.try_get::<i64, _>(name)?)) };
    Ok(UsageTotal {
        calls: count("calls")?,
        usage: Usage {
            input_tokens: count("input")?,
            output_tokens: count("output")?,
            cache_read_tokens: count("cache_read")?,
            cache_write_tokens: count("cache_write")?,
        },
        cost_usd: row.try_get("cost")?,
        unpriced_calls: count("unpriced")?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_pooled_connection_syncs_each_commit_to_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("sessions.db"))
            .await
            .unwrap();
        // Hold every connection the pool may open at once, so each one is
        // looked at, not the same one four times.
        let mut held = Vec::new();
        for _ in 0..crate::reads::MAX {
            held.push(store.reads.acquire().await.unwrap());
        }
        let mut modes = Vec::new();
        for conn in &mut held {
            let mode: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            modes.push(mode);
        }
        // 2 is FULL: a commit is on disk before it returns, so what was
        // acknowledged survives a power cut.
        assert_eq!(modes, vec![2; held.len()]);
    }

    #[tokio::test]
    async fn opening_leaves_reads_to_open_their_own_connection_and_one_read_opens_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("sessions.db"))
            .await
            .unwrap();
        // The schema was checked on the writer's connection: no read
        // connection is open yet.
        assert_eq!(store.reads.idle_count(), 0);
        let key = "cli:one".parse::<SessionKey>().unwrap();
        store.append(&key, &[Message::user("hello")]).await.unwrap();
        assert_eq!(store.history(&key).await.unwrap().len(), 1);
        assert_eq!(store.list().await.unwrap().len(), 1);
        // Reads one after another share one connection.
        assert_eq!(store.reads.idle_count(), 1);
    }

    #[tokio::test]
    async fn closing_through_the_trait_checkpoints_the_log_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let store: std::sync::Arc<dyn crate::SessionStore> =
            std::sync::Arc::new(SqliteStore::open(&path).await.unwrap());
        let key = "cli:one".parse::<SessionKey>().unwrap();
        store.append(&key, &[Message::user("kept")]).await.unwrap();
        let log = dir.path().join("sessions.db-wal");
        assert!(std::fs::metadata(&log).unwrap().len() > 0);
        store.close().await;
        assert!(!log.exists(), "the write-ahead log is still there");
        let reopened = SqliteStore::open(&path).await.unwrap();
        assert_eq!(reopened.history(&key).await.unwrap().len(), 1);
        reopened.close().await;
    }

    #[tokio::test]
    async fn pairing_gives_up_when_no_fresh_code_can_be_had() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("sessions.db"))
            .await
            .unwrap();
        let same = &mut || Ok("AAAAAA".to_owned());
        let first = store
            .pairing_request_with("telegram", "1", None, 0, 60_000, same)
            .await
            .unwrap();
        assert_eq!(first.code, "AAAAAA");
        // Every code tried is taken: an error, not a loop holding the
        // write lock forever.
        let second = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            store.pairing_request_with("telegram", "2", None, 0, 60_000, same),
        )
        .await
        .expect("the request gave up");
        assert_eq!(
            second.unwrap_err().to_string(),
            "cannot make a pairing code on telegram: the 16 codes tried were all taken; the sender may write again later"
        );
        let broken = &mut || Err(getrandom::Error::UNSUPPORTED);
        let third = store
            .pairing_request_with("telegram", "3", None, 0, 60_000, broken)
            .await
            .unwrap_err();
        assert!(
            third
                .to_string()
                .starts_with("cannot make a pairing code on telegram: the operating system's random source failed ("),
            "{third}"
        );
    }
}
