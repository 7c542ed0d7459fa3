//! Session store tests on real SQLite files in temp dirs, with the real
//! migrations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod automation;
mod channels;
mod copy;
mod factory;
mod files;
mod history;
mod metadata;
mod migration;
mod operations;
mod turns;
mod usage;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use flynn_protocol::config::SessionsConfig;
use flynn_protocol::{ContentBlock, Message, Role, SessionKey, TurnId};
use flynn_sessions::{SessionStore, SqliteStore, StoredMessage};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// Where one test's store lives: a SQLite file in a temp dir of its own,
/// or a database of its own on the test PostgreSQL server (dropped with
/// it). The same test body runs on both (see [`on_both!`]).
pub enum Db {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    Postgres {
        admin: String,
        name: String,
    },
}

/// Databases made by this test process, for unique names.
static DATABASES: AtomicU32 = AtomicU32::new(0);

impl Db {
    pub async fn sqlite() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/sessions.db");
        Db::Sqlite { _dir: dir, path }
    }

    /// A fresh database on the server `FLYNN_TEST_POSTGRES_URL` names.
    pub async fn postgres() -> Db {
        let admin = std::env::var("FLYNN_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "FLYNN_TEST_POSTGRES_URL is not set: the PostgreSQL store's tests need a server; \
                 run `export FLYNN_TEST_POSTGRES_URL=$(scripts/postgres.sh)` (or scripts/test.sh)"
            )
        });
        let name = format!(
            "flynn_it_{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot reach the test PostgreSQL server: {e}; is scripts/postgres.sh running?"
                )
            });
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        Db::Postgres { admin, name }
    }

    /// The store's URL, as `sessions.url` would give it.
    pub fn url(&self) -> String {
        match self {
            Db::Sqlite { path, .. } => format!("sqlite://{}", path.display()),
            Db::Postgres { admin, name } => {
                let base = admin
                    .rsplit_once('/')
                    .map_or(admin.as_str(), |(base, _)| base);
                format!("{base}/{name}")
            }
        }
    }

    /// Runs `sql` on the database behind the store's back (the store
    /// closed), as another program or version would.
    pub async fn execute(&self, sql: &'static str) {
        match self {
            Db::Sqlite { path, .. } => {
                sqlx::raw_sql(sql)
                    .execute(&mut raw(path).await)
                    .await
                    .unwrap();
            }
            Db::Postgres { .. } => {
                let mut conn = sqlx::PgConnection::connect(&self.url()).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
        };
    }

    /// A store on this database; opened again, it is a restart.
    pub async fn open(&self) -> Arc<dyn SessionStore> {
        let config = SessionsConfig {
            url: Some(self.url()),
            ..SessionsConfig::default()
        };
        flynn_sessions::open(&config, Path::new("/nonexistent"))
            .await
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.url()))
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let Db::Postgres { admin, name } = self else {
            return;
        };
        let (admin, name) = (admin.clone(), name.clone());
        // Dropped on a thread of its own: `Drop` cannot wait on the test's
        // runtime.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                        .execute(&mut conn)
                        .await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// Runs each named test body (`async fn name(db: Db)`) against SQLite and
/// against PostgreSQL, as the tests `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name($crate::Db::sqlite().await).await;
                }

                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::Db::postgres().await).await;
                }
            }
        )*
    };
}

pub fn key(s: &str) -> SessionKey {
    s.parse().unwrap()
}

/// A fresh store in a directory the store has to create.
pub async fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("nested/sessions.db"))
        .await
        .unwrap();
    (dir, store)
}

/// A second connection to a store's file, to look at or change it behind
/// the store's back.
pub async fn raw(path: &Path) -> sqlx::SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .unwrap()
}

pub fn tool_exchange() -> Vec<Message> {
    vec![
        Message::user("list files"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "use the shell".into(),
                    signature: Some("sig-1".into()),
                },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "shell.exec".into(),
                    input: serde_json::json!({"command": "ls"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "a.txt".into(),
                is_error: false,
            }],
        },
        Message::assistant("There is a.txt."),
    ]
}

/// The messages of a history, in order.
pub fn messages(history: &[StoredMessage]) -> Vec<Message> {
    history.iter().map(|m| m.message.clone()).collect()
}

/// Each message's sequence number and text, in order.
pub fn numbered(history: &[StoredMessage]) -> Vec<(u64, String)> {
    history.iter().map(|m| (m.seq, m.message.text())).collect()
}

/// Each message's sequence number and turn, in order.
pub fn turns_of(history: &[StoredMessage]) -> Vec<(u64, Option<TurnId>)> {
    history.iter().map(|m| (m.seq, m.turn)).collect()
}
