//! Every row of one session store into another, empty one: how an
//! installation moves from its SQLite file to PostgreSQL (and back).
//!
//! Both backends keep the same tables and columns; each table is read in
//! the order of its key and written with its values as they are, so
//! message numbers, positions, turn ids and times survive the move, and
//! so do the high-water marks that keep numbers from being reused. The
//! source is read in one transaction (a consistent view, even with a
//! daemon still writing, though what it writes after is not copied); the
//! target is written in one transaction, checked row count by row count
//! before it commits, so a failed copy leaves it empty.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Row};

use crate::postgres::Connected;
use crate::{Error, PgStore, Result, SqliteStore, StoreLocation};

/// How a column's values are read and written on both backends.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Int,
    Real,
    Text,
    /// SQLite keeps 0 or 1; PostgreSQL a `BOOLEAN`.
    Bool,
    /// SQLite's `BLOB`, PostgreSQL's `BYTEA`.
    Blob,
}

/// One value of a row being copied.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Bool(Option<bool>),
    Blob(Option<Vec<u8>>),
}

struct Table {
    name: &'static str,
    /// What its rows are, for people.
    label: &'static str,
    order: &'static str,
    columns: &'static [(&'static str, Kind)],
}

use Kind::{Blob, Bool, Int, Real, Text};

/// Every table of the store, parents before the rows that refer to them.
/// `usage` is copied without its row id, which only orders it: rows are
/// written in the source's order and numbered afresh.
const TABLES: &[Table] = &[
    Table {
        name: "sessions",
        label: "sessions",
        order: "key",
        columns: &[
            ("key", Text),
            ("created_at", Int),
            ("updated_at", Int),
            ("agent", Text),
            ("tier", Text),
            ("model", Text),
            ("title", Text),
            ("last_channel", Text),
            ("taint", Text),
            ("voice", Text),
        ],
    },
    Table {
        name: "messages",
        label: "messages",
        order: "seq",
        columns: &[
            ("seq", Int),
            ("session_key", Text),
            ("pos", Int),
            ("turn_id", Int),
            ("role", Text),
            ("content", Text),
            ("created_at", Int),
        ],
    },
    Table {
        name: "turns",
        label: "turns",
        order: "id",
        columns: &[
            ("id", Int),
            ("session_key", Text),
            ("status", Text),
            ("content", Text),
            ("agent", Text),
            ("owner_pid", Int),
            ("message_seq", Int),
            ("created_at", Int),
            ("updated_at", Int),
            ("external_id", Text),
            ("principal", Text),
            ("delivered_at", Int),
        ],
    },
    Table {
        name: "usage",
        label: "usage records",
        order: "id",
        columns: &[
            ("session_key", Text),
            ("provider", Text),
            ("model", Text),
            ("tier", Text),
            ("purpose", Text),
            ("input_tokens", Int),
            ("output_tokens", Int),
            ("cache_read_tokens", Int),
            ("cache_write_tokens", Int),
            ("cost_usd", Real),
            ("created_at", Int),
            ("partial", Bool),
        ],
    },
    Table {
        name: "tool_outputs",
        label: "kept tool outputs",
        order: "session_key, call_id",
        columns: &[
            ("session_key", Text),
            ("call_id", Text),
            ("tool", Text),
            ("content", Text),
            ("created_at", Int),
        ],
    },
    Table {
        name: "files",
        label: "files sent to chats",
        order: "id",
        columns: &[
            ("id", Text),
            ("session_key", Text),
            ("turn_id", Int),
            ("name", Text),
            ("media_type", Text),
            ("kind", Text),
            ("caption", Text),
            ("size", Int),
            ("data", Blob),
            ("created_at", Int),
            ("sent_at", Int),
        ],
    },
    Table {
        name: "channel_peers",
        label: "approved senders",
        order: "channel, sender",
        columns: &[
            ("channel", Text),
            ("sender", Text),
            ("name", Text),
            ("approved_at", Int),
            ("owner", Bool),
        ],
    },
    Table {
        name: "pairing_codes",
        label: "pairing codes",
        order: "channel, code",
        columns: &[
            ("channel", Text),
            ("code", Text),
            ("sender", Text),
            ("name", Text),
            ("created_at", Int),
            ("expires_at", Int),
        ],
    },
    Table {
        name: "cron_jobs",
        label: "cron jobs",
        order: "name",
        columns: &[
            ("name", Text),
            ("schedule", Text),
            ("timezone", Text),
            ("message", Text),
            ("agent", Text),
            ("session", Text),
            ("deliver_to", Text),
            ("missed", Text),
            ("enabled", Bool),
            ("created_by", Text),
            ("created_at", Int),
        ],
    },
    Table {
        name: "automation_runs",
        label: "job run records",
        order: "kind, name",
        columns: &[
            ("kind", Text),
            ("name", Text),
            ("since", Int),
            ("scheduled_for", Int),
            ("started_at", Int),
            ("finished_at", Int),
            ("outcome", Text),
            ("error", Text),
            ("session_key", Text),
            ("turn_id", Int),
            ("cursor", Text),
        ],
    },
];

/// What [`copy`] copied: rows by table, in [`TABLES`]' order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub rows: Vec<(&'static str, u64)>,
}

impl std::fmt::Display for CopyReport {
    /// What was copied, for people: "3 sessions, 6 messages, ...", or
    /// "nothing".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let copied: Vec<String> = self
            .rows
            .iter()
            .filter(|(_, rows)| *rows > 0)
            .map(|(name, rows)| {
                let label = TABLES
                    .iter()
                    .find(|table| table.name == *name)
                    .map_or(*name, |table| table.label);
                format!("{rows} {label}")
            })
            .collect();
        if copied.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&copied.join(", "))
        }
    }
}

impl CopyReport {
    /// The rows of `table`, 0 for a table the report does not know.
    pub fn rows_of(&self, table: &str) -> u64 {
        self.rows
            .iter()
            .find(|(name, _)| *name == table)
            .map_or(0, |(_, rows)| *rows)
    }
}

/// The highest message number and turn id ever handed out, deleted rows
/// included: the target hands out none at or below them.
#[derive(Debug, Clone, Copy, Default)]
struct Marks {
    seq: i64,
    turn: i64,
}

/// One end of a copy, on a connection of its own.
enum End {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// Copies every row of the store at `from` into the store at `to`, which
/// must hold nothing yet (it is created, or its schema brought up to date,
/// first). Stop the daemons using `from` first: what they write during the
/// copy is not copied.
pub async fn copy(from: &StoreLocation, to: &StoreLocation) -> Result<CopyReport> {
    if from == to {
        return Err(Error::Backend {
            message: format!(
                "cannot copy the session store {} onto itself",
                from.redacted()
            ),
        });
    }
    let mut source = connect(from).await?;
    let mut target = connect(to).await?;
    let outcome = copy_between(&mut source, &mut target, to).await;
    close(source).await;
    close(target).await;
    outcome
}

/// Opens the store at `location` through its own type (which creates it
/// and brings its schema up to date, and folds the SQLite store's
/// delivery marks into its file), then a plain connection to it.
async fn connect(location: &StoreLocation) -> Result<End> {
    match location {
        StoreLocation::Sqlite(path) => {
            let store = SqliteStore::open(path).await?;
            store.fold_delivered().await?;
            store.close().await;
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .foreign_keys(true)
                .busy_timeout(crate::retry::BUSY_TIMEOUT);
            let conn = SqliteConnection::connect_with(&options)
                .await
                .map_err(|e| Error::Open {
                    location: path.display().to_string(),
                    message: e.to_string(),
                })?;
            Ok(End::Sqlite(conn))
        }
        StoreLocation::Postgres(url) => {
            let store = PgStore::open(url).await?;
            store.close().await;
            Ok(End::Postgres(Connected::to(url).await?.conn))
        }
    }
}

async fn close(end: End) {
    let _ = match end {
        End::Sqlite(conn) => conn.close().await,
        End::Postgres(conn) => conn.close().await,
    };
}

async fn copy_between(
    source: &mut End,
    target: &mut End,
    to: &StoreLocation,
) -> Result<CopyReport> {
    run(
        source,
        "BEGIN",
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    )
    .await?;
    run(target, "BEGIN IMMEDIATE", "BEGIN").await?;
    let copied = async {
        let mut held = Vec::new();
        for table in TABLES {
            let rows = count(target, table.name).await?;
            if rows > 0 {
                held.push(format!("{rows} {}", table.label));
            }
        }
        if !held.is_empty() {
            return Err(Error::Backend {
                message: format!(
                    "the session store {} is not empty ({}): copy into an empty database (a new file, or a new PostgreSQL database)",
                    to.redacted(),
                    held.join(", ")
                ),
            });
        }
        let mut rows = Vec::with_capacity(TABLES.len());
        for table in TABLES {
            let copied = copy_table(source, target, table).await?;
            let written = count(target, table.name).await?;
            if written != copied {
                return Err(Error::Backend {
                    message: format!(
                        "the copy of table {} holds {written} row(s) where {copied} were read; nothing was stored",
                        table.name
                    ),
                });
            }
            rows.push((table.name, copied));
        }
        let marks = marks(source).await?;
        raise_marks(target, marks).await?;
        Ok(CopyReport { rows })
    }
    .await;
    match copied {
        Ok(report) => {
            run(target, "COMMIT", "COMMIT").await?;
            run(source, "COMMIT", "COMMIT").await?;
            Ok(report)
        }
        Err(error) => {
            let _ = run(target, "ROLLBACK", "ROLLBACK").await;
            let _ = run(source, "ROLLBACK", "ROLLBACK").await;
            Err(error)
        }
    }
}

/// Runs `sqlite` or `postgres`, whichever fits `end`'s backend.
async fn run(end: &mut End, sqlite: &'static str, postgres: &'static str) -> Result<()> {
    match end {
        End::Sqlite(conn) => {
            sqlx::raw_sql(sqlite).execute(conn).await?;
        }
        End::Postgres(conn) => {
            sqlx::raw_sql(postgres).execute(conn).await?;
        }
    }
    Ok(())
}

async fn count(end: &mut End, table: &str) -> Result<u64> {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    let rows: i64 = match end {
        End::Sqlite(conn) => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(conn)
                .await?
        }
        End::Postgres(conn) => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(conn)
                .await?
        }
    };
    Ok(u64::try_from(rows).unwrap_or_default())
}

/// Copies one table, row by row as it is read; returns how many rows.
async fn copy_table(source: &mut End, target: &mut End, table: &Table) -> Result<u64> {
    let names: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
    let select = format!(
        "SELECT {} FROM {} ORDER BY {}",
        names.join(", "),
        table.name,
        table.order
    );
    let placeholders: Vec<String> = (1..=names.len())
        .map(|i| match target {
            End::Sqlite(_) => format!("?{i}"),
            End::Postgres(_) => format!("${i}"),
        })
        .collect();
    let insert = format!(
        "INSERT INTO {} ({}) VALUES ({})",
        table.name,
        names.join(", "),
        placeholders.join(", ")
    );
    let mut copied = 0;
    match source {
        End::Sqlite(conn) => {
            let mut rows = sqlx::query(sqlx::AssertSqlSafe(select)).fetch(conn);
            while let Some(row) = rows.try_next().await? {
                let values = read_sqlite(&row, table)?;
                write(target, &insert, values).await?;
                copied += 1;
            }
        }
        End::Postgres(conn) => {
            let mut rows = sqlx::query(sqlx::AssertSqlSafe(select)).fetch(conn);
            while let Some(row) = rows.try_next().await? {
                let values = read_postgres(&row, table)?;
                write(target, &insert, values).await?;
                copied += 1;
            }
        }
    }
    Ok(copied)
}

fn read_sqlite(row: &sqlx::sqlite::SqliteRow, table: &Table) -> Result<Vec<Value>> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            Ok(match kind {
                Int => Value::Int(row.try_get(i)?),
                Real => Value::Real(row.try_get(i)?),
                Text => Value::Text(row.try_get(i)?),
                Bool => Value::Bool(row.try_get::<Option<i64>, _>(i)?.map(|n| n != 0)),
                Blob => Value::Blob(row.try_get(i)?),
            })
        })
        .collect()
}

fn read_postgres(row: &sqlx::postgres::PgRow, table: &Table) -> Result<Vec<Value>> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            Ok(match kind {
                Int => Value::Int(row.try_get(i)?),
                Real => Value::Real(row.try_get(i)?),
                Text => Value::Text(row.try_get(i)?),
                Bool => Value::Bool(row.try_get(i)?),
                Blob => Value::Blob(row.try_get(i)?),
            })
        })
        .collect()
}

async fn write(target: &mut End, insert: &str, values: Vec<Value>) -> Result<()> {
    match target {
        End::Sqlite(conn) => {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(insert.to_owned()));
            for value in values {
                query = match value {
                    Value::Int(v) => query.bind(v),
                    Value::Real(v) => query.bind(v),
                    Value::Text(v) => query.bind(v),
                    Value::Bool(v) => query.bind(v.map(i64::from)),
                    Value::Blob(v) => query.bind(v),
                };
            }
            query.execute(conn).await?;
        }
        End::Postgres(conn) => {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(insert.to_owned()));
            for value in values {
                query = match value {
                    Value::Int(v) => query.bind(v),
                    Value::Real(v) => query.bind(v),
                    Value::Text(v) => query.bind(v.map(|text| text.replace('\0', "\u{FFFD}"))),
                    Value::Bool(v) => query.bind(v),
                    Value::Blob(v) => query.bind(v),
                };
            }
            query.execute(conn).await?;
        }
    }
    Ok(())
}

/// The source's high-water marks (its counters, or SQLite's
/// `AUTOINCREMENT` table).
async fn marks(source: &mut End) -> Result<Marks> {
    match source {
        End::Sqlite(conn) => {
            let found: BTreeMap<String, i64> =
                sqlx::query_as::<_, (String, i64)>("SELECT name, seq FROM sqlite_sequence")
                    .fetch_all(conn)
                    .await?
                    .into_iter()
                    .collect();
            Ok(Marks {
                seq: found.get("messages").copied().unwrap_or_default(),
                turn: found.get("turns").copied().unwrap_or_default(),
            })
        }
        End::Postgres(conn) => {
            // A sequence never called yet has handed out nothing.
            let (seq, turn): (i64, i64) = sqlx::query_as(
                "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM message_seqs),
                        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM turn_ids)",
            )
            .fetch_one(conn)
            .await?;
            Ok(Marks { seq, turn })
        }
    }
}

/// Makes the target hand out numbers above `marks` and above what it now
/// holds.
async fn raise_marks(target: &mut End, marks: Marks) -> Result<()> {
    match target {
        End::Sqlite(conn) => {
            for (table, mark) in [("messages", marks.seq), ("turns", marks.turn)] {
                let updated =
                    sqlx::query("UPDATE sqlite_sequence SET seq = MAX(seq, ?2) WHERE name = ?1")
                        .bind(table)
                        .bind(mark)
                        .execute(&mut *conn)
                        .await?;
                if updated.rows_affected() == 0 && mark > 0 {
                    sqlx::query("INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)")
                        .bind(table)
                        .bind(mark)
                        .execute(&mut *conn)
                        .await?;
                }
            }
        }
        End::Postgres(conn) => {
            sqlx::query(
                "SELECT setval('message_seqs', mark, true) FROM (SELECT GREATEST($1,
                     (SELECT COALESCE(MAX(seq), 0) FROM messages),
                     (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM message_seqs))
                     AS mark) AS m WHERE mark > 0",
            )
            .bind(marks.seq)
            .execute(&mut *conn)
            .await?;
            sqlx::query(
                "SELECT setval('turn_ids', mark, true) FROM (SELECT GREATEST($1,
                     (SELECT COALESCE(MAX(id), 0) FROM turns),
                     (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM turn_ids))
                     AS mark) AS t WHERE mark > 0",
            )
            .bind(marks.turn)
            .execute(conn)
            .await?;
        }
    }
    Ok(())
}
