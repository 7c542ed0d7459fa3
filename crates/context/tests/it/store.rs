//! The real SQLite store, driven on a runtime of its own.
//!
//! Tests of timeouts run with tokio's clock paused, which jumps ahead
//! whenever the test's runtime is idle; sqlx waits for SQLite's worker
//! thread under a pool timeout, so on a paused runtime that timeout would
//! fire at once. Running the store on its own real-time runtime keeps its
//! timers away from the paused clock; nothing else changes.

use std::future::Future;

use async_trait::async_trait;
use flynn_protocol::{ContentBlock, Message, SessionKey, Tier, TurnId};
use flynn_sessions::{
    ApprovedPeer, DayUsage, PairingError, PairingTicket, PendingPairing, Result, SessionInfo,
    SessionMeta, SessionStore, SqliteStore, StoredMessage, ToolOutput, TurnOrigin, TurnRecord,
    TurnStatus, UsageLine, UsageRecord, UsageTotal,
};
use tokio::runtime::Runtime;

/// A [`SqliteStore`] on a temp-dir file, run on its own runtime.
pub struct TestStore {
    inner: SqliteStore,
    runtime: Option<Runtime>,
    _dir: tempfile::TempDir,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl TestStore {
    /// A fresh store with the real migrations.
    pub async fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let path = dir.path().join("sessions.db");
        let inner = runtime
            .spawn(async move { SqliteStore::open(&path).await })
            .await
            .unwrap()
            .unwrap();
        TestStore {
            inner,
            runtime: Some(runtime),
            _dir: dir,
        }
    }

    async fn run<T, F>(&self, call: impl FnOnce(SqliteStore) -> F) -> T
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let runtime = self.runtime.as_ref().unwrap();
        runtime.spawn(call(self.inner.clone())).await.unwrap()
    }
}

#[async_trait]
impl SessionStore for TestStore {
    async fn append(&self, key: &SessionKey, messages: &[Message]) -> Result<Vec<u64>> {
        let (key, messages) = (key.clone(), messages.to_vec());
        self.run(|s| async move { s.append(&key, &messages).await })
            .await
    }

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
        let key = key.clone();
        self.run(|s| async move { s.metadata(&key).await }).await
    }

    async fn set_metadata(&self, key: &SessionKey, meta: &SessionMeta) -> Result<()> {
        let (key, meta) = (key.clone(), meta.clone());
        self.run(|s| async move { s.set_metadata(&key, &meta).await })
            .await
    }

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

    async fn peer_approved(&self, channel: &str, sender: &str) -> Result<bool> {
        let (channel, sender) = (channel.to_owned(), sender.to_owned());
        self.run(|s| async move { s.peer_approved(&channel, &sender).await })
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

    async fn usage_by_day(&self, since: i64) -> Result<Vec<DayUsage>> {
        self.run(|s| async move { s.usage_by_day(since).await })
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

    async fn accept(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord> {
        let (key, content, origin) = (key.clone(), content.to_vec(), origin.clone());
        self.run(|s| async move { s.accept(&key, &content, &origin).await })
            .await
    }

    async fn start_turn(&self, turn: TurnId, owner_pid: u32) -> Result<u64> {
        self.run(|s| async move { s.start_turn(turn, owner_pid).await })
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
}
