use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use flynn_protocol::config::SessionsConfig;
use flynn_protocol::{Message, Role, SessionKey, Tier, Usage};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};

use crate::{Error, Result, SessionInfo, SessionStore, UsageRecord, UsageTotal};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Sessions in a SQLite file (WAL mode, foreign keys on).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its
    /// schema up to date.
    pub async fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|source| Error::Open {
                path: path.to_path_buf(),
                source,
            })?;
        MIGRATOR.run(&pool).await.map_err(|source| Error::Migrate {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(SqliteStore {
            pool,
            path: path.to_path_buf(),
        })
    }

    /// Opens the database `sessions.database` names, else
    /// `<home>/sessions.db`.
    pub async fn open_configured(config: &SessionsConfig, home: &Path) -> Result<Self> {
        Self::open(&database_path(config, home)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes every connection, checkpointing the WAL.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn insert(
        tx: &mut Transaction<'_, Sqlite>,
        key: &SessionKey,
        messages: &[Message],
        now: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at) VALUES (?1, ?2, ?2)
             ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at",
        )
        .bind(key.as_str())
        .bind(now)
        .execute(&mut **tx)
        .await?;
        let next: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE session_key = ?1",
        )
        .bind(key.as_str())
        .fetch_one(&mut **tx)
        .await?;
        for (offset, message) in messages.iter().enumerate() {
            let content =
                serde_json::to_string(&message.content).map_err(|source| Error::Corrupt {
                    key: key.to_string(),
                    seq: next + offset as i64,
                    source,
                })?;
            sqlx::query(
                "INSERT INTO messages (session_key, seq, role, content, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .bind(key.as_str())
            .bind(next + offset as i64)
            .bind(message.role.as_str())
            .bind(content)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }
}

/// Where the session database lives: `sessions.database`, else
/// `<home>/sessions.db`.
pub fn database_path(config: &SessionsConfig, home: &Path) -> PathBuf {
    config
        .database
        .clone()
        .unwrap_or_else(|| home.join("sessions.db"))
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn info_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<Option<SessionInfo>> {
    let key: String = row.try_get("key")?;
    // Keys are validated on the way in; a row that no longer parses is skipped.
    let Ok(key) = SessionKey::from_str(&key) else {
        return Ok(None);
    };
    let count: i64 = row.try_get("message_count")?;
    Ok(Some(SessionInfo {
        key,
        message_count: u64::try_from(count).unwrap_or(0),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    }))
}

macro_rules! info_select {
    ($tail:literal) => {
        concat!(
            "SELECT s.key, s.created_at, s.updated_at,
                (SELECT COUNT(*) FROM messages m WHERE m.session_key = s.key) AS message_count
             FROM sessions s ",
            $tail
        )
    };
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn append(&self, key: &SessionKey, messages: &[Message]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::insert(&mut tx, key, messages, now_millis()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn history(&self, key: &SessionKey) -> Result<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT seq, role, content FROM messages WHERE session_key = ?1 ORDER BY seq",
        )
        .bind(key.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get("seq")?;
                let role: String = row.try_get("role")?;
                let content: String = row.try_get("content")?;
                let corrupt = |source| Error::Corrupt {
                    key: key.to_string(),
                    seq,
                    source,
                };
                let role = serde_json::from_value::<Role>(serde_json::Value::String(role))
                    .map_err(corrupt)?;
                let content = serde_json::from_str(&content).map_err(corrupt)?;
                Ok(Message { role, content })
            })
            .collect()
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
        let row = sqlx::query(info_select!("WHERE s.key = ?1"))
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => info_from_row(&row),
            None => Ok(None),
        }
    }

    async fn clear(&self, key: &SessionKey) -> Result<bool> {
        let done = sqlx::query("DELETE FROM sessions WHERE key = ?1")
            .bind(key.as_str())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn replace_history(&self, key: &SessionKey, messages: &[Message]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM messages WHERE session_key = ?1")
            .bind(key.as_str())
            .execute(&mut *tx)
            .await?;
        Self::insert(&mut tx, key, messages, now_millis()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn record_usage(&self, record: &UsageRecord) -> Result<()> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO usage (session_key, provider, model, tier, input_tokens, output_tokens,
                 cache_read_tokens, cache_write_tokens, cost_usd, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .bind(record.session.as_str())
        .bind(&record.provider)
        .bind(&record.model)
        .bind(record.tier.as_str())
        .bind(count(record.usage.input_tokens))
        .bind(count(record.usage.output_tokens))
        .bind(count(record.usage.cache_read_tokens))
        .bind(count(record.usage.cache_write_tokens))
        .bind(record.cost_usd)
        .bind(now_millis())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn usage_by_tier(&self, session: Option<&SessionKey>) -> Result<Vec<(Tier, UsageTotal)>> {
        let rows = sqlx::query(
            "SELECT tier, COUNT(*) AS calls,
                    SUM(input_tokens) AS input, SUM(output_tokens) AS output,
                    SUM(cache_read_tokens) AS cache_read, SUM(cache_write_tokens) AS cache_write,
                    COALESCE(SUM(cost_usd), 0.0) AS cost,
                    SUM(cost_usd IS NULL) AS unpriced
             FROM usage WHERE ?1 IS NULL OR session_key = ?1
             GROUP BY tier",
        )
        .bind(session.map(SessionKey::as_str))
        .fetch_all(&self.pool)
        .await?;
        let mut totals = Vec::with_capacity(rows.len());
        for row in &rows {
            let tier: String = row.try_get("tier")?;
            // Rows are written from `Tier::as_str`; anything else is skipped.
            let Ok(tier) = tier.parse::<Tier>() else {
                continue;
            };
            let count = |name: &str| -> Result<u64> {
                Ok(u64::try_from(row.try_get::<i64, _>(name)?).unwrap_or(0))
            };
            totals.push((
                tier,
                UsageTotal {
                    calls: count("calls")?,
                    usage: Usage {
                        input_tokens: count("input")?,
                        output_tokens: count("output")?,
                        cache_read_tokens: count("cache_read")?,
                        cache_write_tokens: count("cache_write")?,
                    },
                    cost_usd: row.try_get("cost")?,
                    unpriced_calls: count("unpriced")?,
                },
            ));
        }
        totals.sort_by_key(|(tier, _)| *tier);
        Ok(totals)
    }
}
