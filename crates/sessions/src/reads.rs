//! The store's read connections: a short list of SQLite connections a
//! read borrows and gives back.
//!
//! sqlx's pool gives a connection back through a task it spawns, which
//! first pings the connection's thread: each read cost two more thread
//! switches than its query, and a read right after another found the
//! first connection not yet back and opened a second one (a thread, a
//! file, a round of pragmas: a command that runs one turn opened two read
//! connections for reads that never overlapped). Here a [`Lease`] goes
//! back to the list when it is dropped, at once, with no round trip.
//!
//! What sqlx's release guarded against is handled where it is cheap:
//! - A transaction dropped unfinished has its rollback queued on the
//!   connection, which runs before anything sent after it; a connection
//!   still counting a transaction when it is next lent (its COMMIT failed
//!   on a full disk: SQLite rolled back, sqlx still counts one) is asked a
//!   query first, which lets the queued rollback finish, and is replaced
//!   if it still counts one.
//! - A read dropped while its query runs leaves the query to finish on
//!   the connection's thread; the next one sent waits behind it.
//! - A lease dropped while its thread panics is closed, not lent again.
//!
//! Connections are opened as reads need them, at most [`MAX`] at a time,
//! and kept until the store closes.

use std::sync::{Arc, Mutex, PoisonError};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, Error};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::retry::ACQUIRE_TIMEOUT;

/// The most read connections open at once.
pub(crate) const MAX: usize = 4;

/// The read connections; cheap to share through an `Arc`.
#[derive(Debug)]
pub(crate) struct Reads {
    options: SqliteConnectOptions,
    /// Connections not lent out.
    idle: Mutex<Vec<SqliteConnection>>,
    /// One permit per connection that may be lent; closed with the store.
    permits: Arc<Semaphore>,
}

/// A connection lent to one read (or a transaction of the pool's own);
/// it goes back when dropped.
pub(crate) struct Lease<'r> {
    conn: Option<SqliteConnection>,
    reads: &'r Reads,
    _permit: OwnedSemaphorePermit,
}

impl Reads {
    /// Connections to the database `options` open; none is opened yet.
    pub(crate) fn new(options: SqliteConnectOptions) -> Reads {
        Reads {
            options,
            idle: Mutex::new(Vec::with_capacity(MAX)),
            permits: Arc::new(Semaphore::new(MAX)),
        }
    }

    /// A connection, idle or newly opened; waits up to [`ACQUIRE_TIMEOUT`]
    /// when [`MAX`] are lent out (then `PoolTimedOut`, which the store
    /// reports as busy), and fails with `PoolClosed` once the store is
    /// closed.
    pub(crate) async fn acquire(&self) -> Result<Lease<'_>, Error> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(TryAcquireError::Closed) => return Err(Error::PoolClosed),
            Err(TryAcquireError::NoPermits) => {
                match tokio::time::timeout(ACQUIRE_TIMEOUT, self.permits.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(permit)) => permit,
                    Ok(Err(_)) => return Err(Error::PoolClosed),
                    Err(_) => return Err(Error::PoolTimedOut),
                }
            }
        };
        let idle = self.idle().pop();
        let conn = match idle {
            Some(conn) if !conn.is_in_transaction() => conn,
            Some(mut conn) => {
                let cleared = sqlx::query("SELECT 1").execute(&mut conn).await.is_ok()
                    && !conn.is_in_transaction();
                if cleared {
                    conn
                } else {
                    drop(conn);
                    SqliteConnection::connect_with(&self.options).await?
                }
            }
            None => SqliteConnection::connect_with(&self.options).await?,
        };
        Ok(Lease {
            conn: Some(conn),
            reads: self,
            _permit: permit,
        })
    }

    /// Refuses new leases and closes the idle connections; one lent out
    /// is closed when its lease ends.
    pub(crate) async fn close(&self) {
        self.permits.close();
        let idle = std::mem::take(&mut *self.idle());
        for conn in idle {
            let _ = conn.close().await;
        }
    }

    /// How many connections are open and not lent out.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.idle().len()
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<SqliteConnection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::ops::Deref for Lease<'_> {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        match &self.conn {
            Some(conn) => conn,
            None => unreachable!("a lease holds its connection until it is dropped"),
        }
    }
}

impl std::ops::DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match &mut self.conn {
            Some(conn) => conn,
            None => unreachable!("a lease holds its connection until it is dropped"),
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // Dropped, a connection closes on its own thread.
        if std::thread::panicking() || self.reads.permits.is_closed() {
            return;
        }
        self.reads.idle().push(conn);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn reads(dir: &std::path::Path) -> Reads {
        Reads::new(
            SqliteConnectOptions::new()
                .filename(dir.join("r.db"))
                .create_if_missing(true),
        )
    }

    #[tokio::test]
    async fn reads_one_after_another_share_one_connection() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        for _ in 0..3 {
            let one: i64 = sqlx::query_scalar("SELECT 1")
                .fetch_one(&mut *reads.acquire().await.unwrap())
                .await
                .unwrap();
            assert_eq!(one, 1);
        }
        assert_eq!(reads.idle_count(), 1);
    }

    #[tokio::test]
    async fn overlapping_reads_get_their_own_connections_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        let mut held = Vec::new();
        for _ in 0..MAX {
            held.push(reads.acquire().await.unwrap());
        }
        assert!(matches!(
            reads.permits.clone().try_acquire_owned(),
            Err(TryAcquireError::NoPermits)
        ));
        drop(held);
        assert_eq!(reads.idle_count(), MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_a_connection_and_then_times_out_as_busy() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        // Every permit taken, so no connection is opened for the waiter
        // (opening would let the paused clock run ahead).
        let _all = reads
            .permits
            .clone()
            .acquire_many_owned(u32::try_from(MAX).unwrap())
            .await
            .unwrap();
        let error = reads.acquire().await.err().unwrap();
        assert!(matches!(error, Error::PoolTimedOut), "{error:?}");
        assert!(crate::Error::from(error).is_retryable());
    }

    #[tokio::test]
    async fn a_transaction_dropped_unfinished_is_rolled_back_before_the_next_read() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        {
            let mut conn = reads.acquire().await.unwrap();
            sqlx::query("CREATE TABLE t (x)")
                .execute(&mut *conn)
                .await
                .unwrap();
            let mut tx = conn.begin().await.unwrap();
            sqlx::query("INSERT INTO t VALUES (1)")
                .execute(&mut *tx)
                .await
                .unwrap();
            // Dropped without a commit.
        }
        let mut conn = reads.acquire().await.unwrap();
        assert!(!conn.is_in_transaction());
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(rows, 0);
    }

    #[tokio::test]
    async fn closed_reads_refuse_new_leases_and_close_what_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        let lent = reads.acquire().await.unwrap();
        drop(reads.acquire().await.unwrap());
        reads.close().await;
        assert_eq!(reads.idle_count(), 0);
        drop(lent);
        assert_eq!(
            reads.idle_count(),
            0,
            "a connection came back after closing"
        );
        assert!(matches!(
            reads.acquire().await.err(),
            Some(Error::PoolClosed)
        ));
    }
}
