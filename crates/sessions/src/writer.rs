//! The store's single writer, with group commit.
//!
//! Every write of a turn (accepting a message, starting the turn, storing
//! tool results and the answer, finishing it) used to be a transaction of
//! its own on whichever pooled connection was free: the connections then
//! queued for SQLite's one write lock, and each commit waited for its own
//! `fsync` (the store syncs every commit, see [`SqliteStore::open`]). With
//! many turns at once the disk's sync rate, not the CPU, set how many
//! turns a second the daemon ran.
//!
//! Here one connection, on a thread of its own, does the writing. It takes
//! every write waiting when it is free, runs them in one transaction (each
//! in a savepoint of its own, so one that fails leaves the others
//! standing) and commits once: one sync for the whole batch. A write's
//! caller hears of it only once its batch is committed (or has failed), so
//! a returned write is as durable as before. A lone write runs without a
//! savepoint: it is the transaction.
//!
//! [`SqliteStore::open`]: crate::SqliteStore::open

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::{Error, Result};

/// The most writes committed together. Enough to take in a burst of
/// turns; small enough that a batch holds the write lock only briefly.
const MAX_BATCH: usize = 64;

/// A future a write returns, borrowing the writer's connection.
pub(crate) type WriteFuture<'c, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'c>>;

/// One write, waiting for its batch.
trait Write: Send {
    /// Runs the write's statements inside the batch's transaction,
    /// keeping its result until the batch is committed.
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> WriteFuture<'c, ()>;

    /// Tells the caller how it went: its result once `committed` is `Ok`,
    /// the error otherwise.
    fn complete(self: Box<Self>, committed: Result<()>);
}

struct Pending<T, F> {
    work: Option<F>,
    value: Option<T>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Write for Pending<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> WriteFuture<'c, T> + Send + 'static,
{
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> WriteFuture<'c, ()> {
        Box::pin(async move {
            let Some(work) = self.work.take() else {
                return Err(Error::Backend {
                    message: "a write was run twice by the store's writer".to_owned(),
                });
            };
            self.value = Some(work(conn).await?);
            Ok(())
        })
    }

    fn complete(self: Box<Self>, committed: Result<()>) {
        let Pending { value, reply, .. } = *self;
        let outcome = committed.and_then(|()| {
            value.ok_or_else(|| Error::Backend {
                message: "a write was committed without having run".to_owned(),
            })
        });
        // A caller that stopped waiting (its turn was cancelled) does not
        // change what was written.
        let _ = reply.send(outcome);
    }
}

enum Message {
    Write(Box<dyn Write>),
    Close(oneshot::Sender<()>),
}

/// The handle to the writer thread; cheap to share through an `Arc`.
#[derive(Debug)]
pub(crate) struct Writer {
    queue: mpsc::UnboundedSender<Message>,
    /// Transactions committed so far.
    commits: Arc<AtomicU64>,
}

/// What a write is told when the writer is gone.
fn stopped() -> Error {
    Error::Backend {
        message: "the session database's writer has stopped (the store was closed)".to_owned(),
    }
}

impl Writer {
    /// Starts the writer on a thread of its own, writing through `conn`;
    /// `options` open a connection for the next batch when there is none
    /// (`conn` was `None`, or the connection was dropped after a failed
    /// commit), and a write that finds none openable hears why. The thread
    /// ends when the store is closed or dropped.
    pub(crate) fn start(
        options: SqliteConnectOptions,
        conn: Option<SqliteConnection>,
        location: &str,
    ) -> Result<Writer> {
        let (queue, inbox) = mpsc::unbounded_channel();
        let commits = Arc::new(AtomicU64::new(0));
        let counted = commits.clone();
        std::thread::Builder::new()
            .name("flynn-db-writer".to_owned())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(serve(options, conn, inbox, counted)),
                    Err(e) => refuse_all(inbox, &format!("cannot start its writer: {e}")),
                }
            })
            .map_err(|e| Error::Open {
                location: location.to_owned(),
                message: format!("cannot start its writer thread: {e}"),
            })?;
        Ok(Writer { queue, commits })
    }

    /// Runs `work` in the next batch and returns its result once the batch
    /// is committed. `work` must only write through the connection it is
    /// given, and not wait on anything else: the batch holds SQLite's
    /// write lock meanwhile.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> WriteFuture<'c, T> + Send + 'static,
    {
        let (reply, outcome) = oneshot::channel();
        let pending = Pending {
            work: Some(work),
            value: None,
            reply,
        };
        self.queue
            .send(Message::Write(Box::new(pending)))
            .map_err(|_| stopped())?;
        outcome.await.unwrap_or_else(|_| {
            Err(Error::Backend {
                message:
                    "the session database's writer failed while writing; the write was not stored"
                        .to_owned(),
            })
        })
    }

    /// How many transactions the writer has committed: fewer than the
    /// writes when they came together.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Finishes the writes already queued, then closes the connection.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.queue.send(Message::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

/// Tells every write that comes that the writer could not start.
fn refuse_all(mut inbox: mpsc::UnboundedReceiver<Message>, why: &str) {
    while let Some(message) = inbox.blocking_recv() {
        match message {
            Message::Write(write) => write.complete(Err(Error::Backend {
                message: format!("the session database {why}"),
            })),
            Message::Close(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// The writer thread's loop, on the connection it was given; without one
/// (or after a failed commit dropped it) a connection is opened for the
/// next batch (see [`write_batch`]).
async fn serve(
    options: SqliteConnectOptions,
    mut conn: Option<SqliteConnection>,
    mut inbox: mpsc::UnboundedReceiver<Message>,
    commits: Arc<AtomicU64>,
) {
    let mut batch: Vec<Box<dyn Write>> = Vec::with_capacity(MAX_BATCH);
    let mut closing: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        // Wait for work, unless closing: then only what is queued runs.
        if closing.is_empty() {
            match inbox.recv().await {
                Some(Message::Write(write)) => batch.push(write),
                Some(Message::Close(done)) => closing.push(done),
                None => break,
            }
        }
        while batch.len() < MAX_BATCH {
            match inbox.try_recv() {
                Ok(Message::Write(write)) => batch.push(write),
                Ok(Message::Close(done)) => closing.push(done),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            if closing.is_empty() {
                continue;
            }
            break;
        }
        write_batch(&options, &mut conn, &mut batch, &commits).await;
    }
    inbox.close();
    if let Some(conn) = conn.take() {
        let _ = conn.close().await;
    }
    for done in closing {
        let _ = done.send(());
    }
}

/// Commits `batch` and tells each of its writers how it went.
async fn write_batch(
    options: &SqliteConnectOptions,
    conn: &mut Option<SqliteConnection>,
    batch: &mut Vec<Box<dyn Write>>,
    commits: &AtomicU64,
) {
    let connection = match conn {
        Some(connection) => connection,
        // Not opened yet, or dropped after a failed commit: a new one
        // starts clean.
        None => match SqliteConnection::connect_with(options).await {
            Ok(opened) => conn.insert(opened),
            Err(e) => {
                let message = format!("cannot open the session database to write: {e}");
                for write in batch.drain(..) {
                    write.complete(Err(Error::Backend {
                        message: message.clone(),
                    }));
                }
                return;
            }
        },
    };
    let mut sound = true;
    let outcome = AssertUnwindSafe(commit(connection, batch, &mut sound))
        .catch_unwind()
        .await;
    match outcome {
        Ok(Ok(results)) => {
            commits.fetch_add(1, Ordering::Relaxed);
            for (write, result) in batch.drain(..).zip(results) {
                write.complete(result);
            }
        }
        Ok(Err(error)) => {
            // Nothing of the batch is stored.
            tracing::warn!(%error, writes = batch.len(), "a batch of writes to the session database failed");
            for write in batch.drain(..) {
                write.complete(Err(error.duplicate()));
            }
            sound = false;
        }
        Err(_) => {
            // A bug in one write: its batch is dropped (each caller is
            // told its write failed).
            tracing::error!(
                writes = batch.len(),
                "a write to the session database panicked; its batch was not stored"
            );
            batch.clear();
            sound = false;
        }
    }
    if !sound {
        // A connection whose commit or rollback failed may be left in a
        // state sqlx no longer tracks (see the pool's `after_release` in
        // `SqliteStore::open`): it is replaced.
        *conn = None;
    }
}

/// Runs `batch` in one transaction and commits it. `Ok` holds each
/// write's own outcome (a write that failed was rolled back to its
/// savepoint, or with the transaction when it was alone); `Err` means
/// nothing was stored. `sound` turns false when the connection should be
/// replaced (a rollback failed).
async fn commit(
    conn: &mut SqliteConnection,
    batch: &mut [Box<dyn Write>],
    sound: &mut bool,
) -> Result<Vec<Result<()>>> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    if let [only] = batch {
        // A lone write is the transaction: failing, it stores nothing,
        // and its caller hears its own error.
        return match only.run(&mut tx).await {
            Ok(()) => {
                tx.commit().await?;
                Ok(vec![Ok(())])
            }
            Err(error) => {
                if tx.rollback().await.is_err() {
                    *sound = false;
                }
                Ok(vec![Err(error)])
            }
        };
    }
    let mut results = Vec::with_capacity(batch.len());
    for write in batch.iter_mut() {
        results.push(in_savepoint(&mut tx, write.as_mut()).await?);
    }
    tx.commit().await?;
    Ok(results)
}

/// Runs one write of a batch in a savepoint: `Ok(Err)` when it failed and
/// was rolled back alone, `Err` when the rollback failed too (SQLite may
/// have ended the whole transaction), which fails the batch.
async fn in_savepoint(
    tx: &mut Transaction<'_, sqlx::Sqlite>,
    write: &mut dyn Write,
) -> Result<Result<()>> {
    let mut savepoint = tx.begin().await?;
    match write.run(&mut savepoint).await {
        Ok(()) => {
            savepoint.commit().await?;
            Ok(Ok(()))
        }
        Err(error) => {
            savepoint.rollback().await?;
            Ok(Err(error))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use futures::FutureExt;
    use sqlx::sqlite::SqliteJournalMode;

    use super::*;

    async fn writer(dir: &std::path::Path) -> (Writer, SqliteConnectOptions) {
        let options = SqliteConnectOptions::new()
            .filename(dir.join("w.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        create_table(&options).await;
        let conn = SqliteConnection::connect_with(&options).await.unwrap();
        (
            Writer::start(options.clone(), Some(conn), "w.db").unwrap(),
            options,
        )
    }

    async fn create_table(options: &SqliteConnectOptions) {
        let mut setup = SqliteConnection::connect_with(options).await.unwrap();
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .execute(&mut setup)
            .await
            .unwrap();
        setup.close().await.unwrap();
    }

    fn insert(id: i64) -> impl for<'c> FnOnce(&'c mut SqliteConnection) -> WriteFuture<'c, i64> {
        move |conn| {
            Box::pin(async move {
                sqlx::query("INSERT INTO t (id, v) VALUES (?1, 'x')")
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                Ok(id)
            })
        }
    }

    async fn stored(options: &SqliteConnectOptions) -> Vec<i64> {
        let mut conn = SqliteConnection::connect_with(options).await.unwrap();
        sqlx::query_scalar("SELECT id FROM t ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn writes_waiting_together_commit_together_and_one_failing_leaves_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, options) = writer(dir.path()).await;
        // The first write holds its batch open until told to finish, so
        // every write queued meanwhile waits for the next batch.
        let (started, running) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let first = writer.write(move |conn| {
            Box::pin(async move {
                let _ = started.send(());
                let _ = released.await;
                sqlx::query("INSERT INTO t (id, v) VALUES (1, 'first')")
                    .execute(&mut *conn)
                    .await?;
                Ok(1_i64)
            })
        });
        let mut first = Box::pin(first);
        assert!(first.as_mut().now_or_never().is_none());
        running.await.unwrap();
        // Ids 2..=20, and 1 again at 7 and 13: those two fail (the key is
        // taken by the time they run), the others must not.
        let ids: Vec<i64> = (2..=20)
            .map(|i| if i == 7 || i == 13 { 1 } else { i })
            .collect();
        let mut queued: Vec<_> = ids
            .iter()
            .map(|&id| Box::pin(writer.write(insert(id))))
            .collect();
        for write in &mut queued {
            assert!(
                write.as_mut().now_or_never().is_none(),
                "nothing is committed yet"
            );
        }
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 1);
        let results = futures::future::join_all(queued).await;
        for (id, result) in ids.iter().zip(&results) {
            match id {
                1 => assert!(
                    result.as_ref().unwrap_err().to_string().contains("UNIQUE"),
                    "{result:?}"
                ),
                id => assert_eq!(result.as_ref().unwrap(), id),
            }
        }
        // One commit for the first write, one for the nineteen after it.
        assert_eq!(writer.commits(), 2);
        let expected: Vec<i64> = (1..=20).filter(|i| *i != 7 && *i != 13).collect();
        assert_eq!(stored(&options).await, expected);
    }

    #[tokio::test]
    async fn a_lone_write_that_fails_stores_nothing_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, options) = writer(dir.path()).await;
        let half = writer
            .write(|conn| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t (id, v) VALUES (1, 'a')")
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query("INSERT INTO t (id, v) VALUES (1, 'b')")
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            })
            .await;
        assert!(half.is_err());
        assert_eq!(writer.write(insert(2)).await.unwrap(), 2);
        assert_eq!(stored(&options).await, vec![2]);
    }

    #[tokio::test]
    async fn a_closed_writer_finishes_what_was_queued_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, options) = writer(dir.path()).await;
        let mut queued = Box::pin(writer.write(insert(5)));
        assert!(queued.as_mut().now_or_never().is_none());
        writer.close().await;
        assert_eq!(queued.await.unwrap(), 5);
        let refused = writer.write(insert(6)).await.unwrap_err();
        assert!(refused.to_string().contains("closed"), "{refused}");
        assert_eq!(stored(&options).await, vec![5]);
    }

    #[tokio::test]
    async fn a_write_that_panics_fails_alone_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, options) = writer(dir.path()).await;
        let failed = writer
            .write(|conn| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t (id, v) VALUES (1, 'a')")
                        .execute(&mut *conn)
                        .await?;
                    if conn.is_in_transaction() {
                        panic!("a bug in a write");
                    }
                    Ok(())
                })
            })
            .await
            .unwrap_err();
        assert!(failed.to_string().contains("was not stored"), "{failed}");
        assert_eq!(writer.write(insert(2)).await.unwrap(), 2);
        assert_eq!(stored(&options).await, vec![2]);
    }

    #[tokio::test]
    async fn a_database_the_writer_cannot_open_fails_each_write_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone").join("w.db");
        let writer =
            Writer::start(SqliteConnectOptions::new().filename(&missing), None, "w.db").unwrap();
        for _ in 0..2 {
            let refused = writer.write(insert(1)).await.unwrap_err().to_string();
            assert!(
                refused.contains("cannot open the session database to write"),
                "{refused}"
            );
        }
        // Once it can be opened, the next write goes through.
        std::fs::create_dir(missing.parent().unwrap()).unwrap();
        let options = SqliteConnectOptions::new()
            .filename(&missing)
            .create_if_missing(true);
        create_table(&options).await;
        assert_eq!(writer.write(insert(3)).await.unwrap(), 3);
        assert_eq!(stored(&options).await, vec![3]);
    }
}
