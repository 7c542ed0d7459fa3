//! [`RealTimeStore`]: the real SQLite session store, run on a tokio
//! runtime of its own (feature `sessions`).
//!
//! Tests on a paused tokio clock (`start_paused`) see the clock jump ahead
//! whenever their runtime is idle. A [`SqliteStore`] on that runtime would
//! wait for SQLite's worker thread under sqlx's pool timeout, which would
//! then fire at once; and every timer of the code under test would fire
//! while a query is in flight. This store runs the real store on a
//! real-time runtime and waits for each call from a blocking task, which
//! holds the paused clock still until the call returns: simulated time
//! moves only when the code under test waits on a timer.

use std::future::Future;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use flynn_protocol::{ContentBlock, MediaFile, Message, SessionKey, Tier, TurnId};
use flynn_sessions::{
    ApprovedPeer, Conversations, DayUsage, Files, JobKind, JobRuns, Jobs, LastRun, Pairing,
    PairingError, PairingTicket, PendingPairing, Result, SessionInfo, SessionMeta, SqliteStore,
    StoredCronJob, StoredFile, StoredMessage, ToolOutput, TurnOrigin, TurnRecord, TurnStatus,
    Turns, UsageLine, UsageLog, UsageRecord, UsageTotal,
};
use tokio::runtime::Runtime;

/// A [`SqliteStore`] with the real migrations, run on its own runtime.
pub struct RealTimeStore {
    inner: SqliteStore,
    /// Calls to fail with `Busy`, by method name, and how many more times.
    faults: std::sync::Mutex<std::collections::HashMap<&'static str, usize>>,
    runtime: Option<Runtime>,
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for RealTimeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealTimeStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for RealTimeStore {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl RealTimeStore {
    /// A fresh store in a temp dir of its own.
    pub async fn open() -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"));
        let mut store = Self::open_at(&dir.path().join("sessions.db")).await;
        store._dir = Some(dir);
        store
    }

    /// The store in `path` (created if needed): open it again to simulate
    /// a restart.
    pub async fn open_at(path: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build the store's runtime: {e}"));
        let file = path.to_path_buf();
        let handle = runtime.handle().clone();
        let inner = tokio::task::spawn_blocking(move || {
            handle.block_on(async move { SqliteStore::open(&file).await })
        })
        .await
        .unwrap_or_else(|e| panic!("opening the store panicked: {e}"))
        .unwrap_or_else(|e| panic!("cannot open the store: {e}"));
        RealTimeStore {
            inner,
            faults: std::sync::Mutex::default(),
            runtime: Some(runtime),
            path: path.to_path_buf(),
            _dir: None,
        }
    }

    /// Makes the next `times` calls of `method` (`"metadata"`, `"accept"`
    /// (which fails `accept_and_start` too) or `"set_taint"`) fail as a
    /// busy database would.
    pub fn fail_next(&self, method: &'static str, times: usize) {
        self.faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(method, times);
    }

    /// A `Busy` error if a fault is set for `method`.
    fn fault(&self, method: &'static str) -> Result<()> {
        let mut faults = self
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match faults.get_mut(method) {
            Some(left) if *left > 0 => {
                *left -= 1;
                Err(flynn_sessions::Error::Busy {
                    message: format!("{method}: a fault the test asked for"),
                })
            }
            _ => Ok(()),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the store's connections (checkpointing the WAL), so the
    /// file can be opened again.
    pub async fn close(&self) {
        self.run(|s| async move { s.close().await }).await;
    }

    async fn run<T, F>(&self, call: impl FnOnce(SqliteStore) -> F) -> T
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let Some(runtime) = self.runtime.as_ref() else {
            unreachable!("the runtime lives as long as the store");
        };
        let handle = runtime.handle().clone();
        let future = call(self.inner.clone());
        // A blocking task holds a paused clock still while it runs.
        tokio::task::spawn_blocking(move || handle.block_on(future))
            .await
            .unwrap_or_else(|e| panic!("a store call panicked: {e}"))
    }
}

#[async_trait]
impl Conversations for RealTimeStore {
    async fn close(&self) {
        RealTimeStore::close(self).await;
    }

    async fn prune_idle(&self, before: i64) -> Result<Vec<SessionKey>> {
        self.run(move |s| async move { s.prune_idle(before).await })
            .await
    }

    async fn append(&self, key: &SessionKey, messages: &[Message]) -> Result<Vec<u64>> {
        let (key, messages) = (key.clone(), messages.to_vec());
        self.run(|s| async move { s.append(&key, &messages).await })
            .await
    }

    async fn history(&self, key: &SessionKey) -> Result<Vec<StoredMessage>> {
        let key = key.clone();
        self.run(|s| async move { s.history(&key).await }).await
    }

    async fn history_since(&self, key: &SessionKey, after: u64) -> Result<Vec<StoredMessage>> {
        let key = key.clone();
        self.run(|s| async move { s.history_since(&key, after).await })
            .await
    }

    async fn history_page(
        &self,
        key: &SessionKey,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        let key = key.clone();
        self.run(|s| async move { s.history_page(&key, before, limit).await })
            .await
    }

    async fn list(&self) -> Result<Vec<SessionInfo>> {
        self.run(|s| async move { s.list().await }).await
    }

    async fn info(&self, key: &SessionKey) -> Result<Option<SessionInfo>> {
        let key = key.clone();
        self.run(|s| async move { s.info(&key).await }).await
    }

    async fn clear(&self, key: &SessionKey) -> Result<bool> {
        let key = key.clone();
        self.run(|s| async move { s.clear(&key).await }).await
    }

    async fn replace_history(
        &self,
        key: &SessionKey,
        upto: u64,
        replacement: &[Message],
    ) -> Result<Vec<u64>> {
        let (key, replacement) = (key.clone(), replacement.to_vec());
        self.run(|s| async move { s.replace_history(&key, upto, &replacement).await })
            .await
    }

    async fn metadata(&self, key: &SessionKey) -> Result<SessionMeta> {
        self.fault("metadata")?;
        let key = key.clone();
        self.run(|s| async move { s.metadata(&key).await }).await
    }

    async fn set_metadata(&self, key: &SessionKey, meta: &SessionMeta) -> Result<()> {
        let (key, meta) = (key.clone(), meta.clone());
        self.run(|s| async move { s.set_metadata(&key, &meta).await })
            .await
    }

    async fn set_taint(&self, key: &SessionKey, taint: Option<&str>) -> Result<()> {
        self.fault("set_taint")?;
        let (key, taint) = (key.clone(), taint.map(str::to_owned));
        self.run(|s| async move { s.set_taint(&key, taint.as_deref()).await })
            .await
    }

    async fn put_tool_output(&self, key: &SessionKey, output: &ToolOutput) -> Result<()> {
        let (key, output) = (key.clone(), output.clone());
        self.run(|s| async move { s.put_tool_output(&key, &output).await })
            .await
    }

    async fn tool_output(&self, key: &SessionKey, call_id: &str) -> Result<Option<ToolOutput>> {
        let (key, call_id) = (key.clone(), call_id.to_owned());
        self.run(|s| async move { s.tool_output(&key, &call_id).await })
            .await
    }
}

#[async_trait]
impl Turns for RealTimeStore {
    async fn append_answer(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        message: &Message,
        usage: &UsageRecord,
    ) -> Result<u64> {
        let (key, message, usage) = (key.clone(), message.clone(), usage.clone());
        self.run(|s| async move { s.append_answer(&key, turn, &message, &usage).await })
            .await
    }

    async fn append_last_answer(
        &self,
        key: &SessionKey,
        turn: TurnId,
        message: &Message,
        usage: &UsageRecord,
    ) -> Result<u64> {
        let (key, message, usage) = (key.clone(), message.clone(), usage.clone());
        self.run(|s| async move { s.append_last_answer(&key, turn, &message, &usage).await })
            .await
    }

    async fn append_for_turn(
        &self,
        key: &SessionKey,
        turn: TurnId,
        messages: &[Message],
    ) -> Result<Vec<u64>> {
        let (key, messages) = (key.clone(), messages.to_vec());
        self.run(|s| async move { s.append_for_turn(&key, turn, &messages).await })
            .await
    }

    async fn accept(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord> {
        self.fault("accept")?;
        let (key, content, origin) = (key.clone(), content.to_vec(), origin.clone());
        self.run(|s| async move { s.accept(&key, &content, &origin).await })
            .await
    }

    async fn start_turn(&self, turn: TurnId, owner_pid: u32) -> Result<u64> {
        self.run(|s| async move { s.start_turn(turn, owner_pid).await })
            .await
    }

    async fn accept_and_start(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord> {
        self.fault("accept")?;
        let (key, content, origin) = (key.clone(), content.to_vec(), origin.clone());
        self.run(|s| async move { s.accept_and_start(&key, &content, &origin).await })
            .await
    }

    async fn finish_turn(&self, turn: TurnId, status: TurnStatus) -> Result<()> {
        self.run(|s| async move { s.finish_turn(turn, status).await })
            .await
    }

    async fn turn(&self, turn: TurnId) -> Result<Option<TurnRecord>> {
        self.run(|s| async move { s.turn(turn).await }).await
    }

    async fn open_turns(&self, session: Option<&SessionKey>) -> Result<Vec<TurnRecord>> {
        let session = session.cloned();
        self.run(|s| async move { s.open_turns(session.as_ref()).await })
            .await
    }

    async fn mark_delivered(&self, turn: TurnId) -> Result<()> {
        self.run(move |s| async move { s.mark_delivered(turn).await })
            .await
    }

    async fn undelivered_turns(&self, since: i64) -> Result<Vec<TurnRecord>> {
        self.run(move |s| async move { s.undelivered_turns(since).await })
            .await
    }
}

#[async_trait]
impl UsageLog for RealTimeStore {
    async fn record_usage(&self, record: &UsageRecord) -> Result<()> {
        let record = record.clone();
        self.run(|s| async move { s.record_usage(&record).await })
            .await
    }

    async fn usage_by_tier(&self, session: Option<&SessionKey>) -> Result<Vec<(Tier, UsageTotal)>> {
        let session = session.cloned();
        self.run(|s| async move { s.usage_by_tier(session.as_ref()).await })
            .await
    }

    async fn usage_by_purpose(&self, session: Option<&SessionKey>) -> Result<Vec<UsageLine>> {
        let session = session.cloned();
        self.run(|s| async move { s.usage_by_purpose(session.as_ref()).await })
            .await
    }

    async fn usage_by_day(&self, since: i64) -> Result<Vec<DayUsage>> {
        self.run(|s| async move { s.usage_by_day(since).await })
            .await
    }
}

#[async_trait]
impl Pairing for RealTimeStore {
    async fn peer_approved(&self, channel: &str, sender: &str) -> Result<bool> {
        let (channel, sender) = (channel.to_owned(), sender.to_owned());
        self.run(|s| async move { s.peer_approved(&channel, &sender).await })
            .await
    }

    async fn peer_owner(&self, channel: &str, sender: &str) -> Result<bool> {
        let (channel, sender) = (channel.to_owned(), sender.to_owned());
        self.run(|s| async move { s.peer_owner(&channel, &sender).await })
            .await
    }

    async fn set_peer_owner(&self, channel: &str, sender: &str, owner: bool) -> Result<bool> {
        let (channel, sender) = (channel.to_owned(), sender.to_owned());
        self.run(|s| async move { s.set_peer_owner(&channel, &sender, owner).await })
            .await
    }

    async fn pairing_request(
        &self,
        channel: &str,
        sender: &str,
        name: Option<&str>,
        now: i64,
        ttl_ms: i64,
    ) -> Result<PairingTicket> {
        let (channel, sender, name) = (
            channel.to_owned(),
            sender.to_owned(),
            name.map(str::to_owned),
        );
        self.run(|s| async move {
            s.pairing_request(&channel, &sender, name.as_deref(), now, ttl_ms)
                .await
        })
        .await
    }

    async fn pairing_approve(
        &self,
        channel: &str,
        code: &str,
        now: i64,
    ) -> Result<Result<ApprovedPeer, PairingError>> {
        let (channel, code) = (channel.to_owned(), code.to_owned());
        self.run(|s| async move { s.pairing_approve(&channel, &code, now).await })
            .await
    }

    async fn pairing_pending(&self, now: i64) -> Result<Vec<PendingPairing>> {
        self.run(|s| async move { s.pairing_pending(now).await })
            .await
    }

    async fn approved_peers(&self) -> Result<Vec<ApprovedPeer>> {
        self.run(|s| async move { s.approved_peers().await }).await
    }

    async fn revoke_peer(&self, channel: &str, sender: &str) -> Result<bool> {
        let (channel, sender) = (channel.to_owned(), sender.to_owned());
        self.run(|s| async move { s.revoke_peer(&channel, &sender).await })
            .await
    }
}

#[async_trait]
impl Files for RealTimeStore {
    async fn keep_file(
        &self,
        session: &SessionKey,
        turn: Option<TurnId>,
        file: &MediaFile,
        data: &[u8],
    ) -> Result<()> {
        let (session, file, data) = (session.clone(), file.clone(), data.to_vec());
        self.run(|s| async move { s.keep_file(&session, turn, &file, &data).await })
            .await
    }

    async fn file(&self, id: &str) -> Result<Option<(StoredFile, Vec<u8>)>> {
        let id = id.to_owned();
        self.run(|s| async move { s.file(&id).await }).await
    }

    async fn files_of_turns(
        &self,
        session: &SessionKey,
        turns: &[TurnId],
    ) -> Result<Vec<StoredFile>> {
        let (session, turns) = (session.clone(), turns.to_vec());
        self.run(|s| async move { s.files_of_turns(&session, &turns).await })
            .await
    }

    async fn mark_file_sent(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.run(|s| async move { s.mark_file_sent(&id).await })
            .await
    }

    async fn unsent_files(&self, since: i64) -> Result<Vec<StoredFile>> {
        self.run(|s| async move { s.unsent_files(since).await })
            .await
    }

    async fn prune_files(&self, before: i64) -> Result<u64> {
        self.run(|s| async move { s.prune_files(before).await })
            .await
    }
}

#[async_trait]
impl Jobs for RealTimeStore {
    async fn cron_jobs(&self) -> Result<Vec<StoredCronJob>> {
        self.run(|s| async move { s.cron_jobs().await }).await
    }

    async fn add_cron_job(&self, job: &StoredCronJob) -> Result<bool> {
        let job = job.clone();
        self.run(|s| async move { s.add_cron_job(&job).await })
            .await
    }

    async fn remove_cron_job(&self, name: &str) -> Result<bool> {
        let name = name.to_owned();
        self.run(|s| async move { s.remove_cron_job(&name).await })
            .await
    }

    async fn job_runs(&self) -> Result<Vec<JobRuns>> {
        self.run(|s| async move { s.job_runs().await }).await
    }

    async fn track_job(&self, kind: JobKind, name: &str, since: i64) -> Result<JobRuns> {
        let name = name.to_owned();
        self.run(|s| async move { s.track_job(kind, &name, since).await })
            .await
    }

    async fn record_run(&self, kind: JobKind, name: &str, run: &LastRun) -> Result<()> {
        let (name, run) = (name.to_owned(), run.clone());
        self.run(|s| async move { s.record_run(kind, &name, &run).await })
            .await
    }

    async fn job_cursor(&self, kind: JobKind, name: &str) -> Result<Option<String>> {
        let name = name.to_owned();
        self.run(|s| async move { s.job_cursor(kind, &name).await })
            .await
    }

    async fn set_job_cursor(
        &self,
        kind: JobKind,
        name: &str,
        cursor: &str,
        now: i64,
    ) -> Result<()> {
        let (name, cursor) = (name.to_owned(), cursor.to_owned());
        self.run(|s| async move { s.set_job_cursor(kind, &name, &cursor, now).await })
            .await
    }
}
