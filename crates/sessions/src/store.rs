use async_trait::async_trait;
use flynn_protocol::config::{ModelRef, VoiceReply};
use flynn_protocol::{
    ContentBlock, MediaFile, Message, Principal, Purpose, SessionKey, Tier, TurnId, Usage,
};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::automation::{JobKind, JobRuns, LastRun, StoredCronJob};
use crate::pairing::{ApprovedPeer, PairingError, PairingTicket, PendingPairing};

/// A summary of one stored session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub key: SessionKey,
    pub message_count: u64,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds of the last change; always later than the
    /// previous change to any session, so it may run a few milliseconds
    /// ahead of the clock during a burst of writes.
    pub updated_at: i64,
    pub meta: SessionMeta,
}

/// What a session remembers about itself besides its messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The agent chosen for this session (`/agent`), over routing.
    pub agent: Option<String>,
    /// The tier chosen for this session (`/model <tier>`).
    pub tier: Option<Tier>,
    /// The model chosen for this session (`/model provider/model`); wins
    /// over `tier`.
    pub model: Option<ModelRef>,
    pub title: Option<String>,
    /// The channel the last message came from (`telegram`, `cli`...).
    pub last_channel: Option<String>,
    /// What brought untrusted content (a web page, an MCP tool's output, a
    /// webhook body) into the session, e.g. `web.fetch in turn 12`; kept
    /// until the owner clears it (`/trust`) or the session is reset.
    /// Written with [`Conversations::set_taint`], never by
    /// [`Conversations::set_metadata`].
    pub taint: Option<String>,
    /// When the session's answers are also spoken (`/voice`), over the
    /// config's `voice.reply`; `None` leaves it to the config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<VoiceReply>,
}

/// One stored message and where it sits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// Unique and never reused, across every session; grows with every
    /// message stored. A cursor for [`Conversations::history_since`].
    pub seq: u64,
    /// The turn that stored it, when one did.
    pub turn: Option<TurnId>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub message: Message,
    /// Who sent it: set on the message of each turn (a person's message),
    /// `None` on the agent's messages and on messages stored outside a
    /// turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
}

/// One model call's usage, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub session: SessionKey,
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    /// What the call was for: the conversation, or delegated work.
    #[serde(default)]
    pub purpose: Purpose,
    pub usage: Usage,
    /// USD; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
    /// The call was cut short (cancelled, timed out, or its stream broke):
    /// the tokens are what was known or estimated when it ended.
    #[serde(default)]
    pub partial: bool,
}

/// Usage of one tier for one purpose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageLine {
    pub tier: Tier,
    pub purpose: Purpose,
    pub total: UsageTotal,
}

/// Usage of one tier on one day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayUsage {
    /// `YYYY-MM-DD`, in UTC.
    pub day: String,
    pub tier: Tier,
    pub total: UsageTotal,
}

/// A whole tool output kept apart from the history (the model saw a
/// summary of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub call_id: String,
    pub tool: String,
    pub content: String,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// Usage summed over a group of calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotal {
    pub calls: u64,
    pub usage: Usage,
    /// USD, summed over the calls whose price is known.
    pub cost_usd: f64,
    /// Calls whose price is unknown (not in `cost_usd`).
    pub unpriced_calls: u64,
}

impl UsageTotal {
    /// Adds another group's calls to this one.
    pub fn add(&mut self, other: &UsageTotal) {
        self.calls += other.calls;
        self.usage.add(other.usage);
        self.cost_usd += other.cost_usd;
        self.unpriced_calls += other.unpriced_calls;
    }
}

/// Where a turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Accepted and stored; waiting for its lane. Its message is not in
    /// the history yet.
    Pending,
    /// Started: its message is in the history and the model may be
    /// working on it.
    Running,
    Completed,
    Failed,
    Cancelled,
    /// A process stopped while it was pending or running, and start-up
    /// reported it.
    Interrupted,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Pending => "pending",
            TurnStatus::Running => "running",
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
            TurnStatus::Cancelled => "cancelled",
            TurnStatus::Interrupted => "interrupted",
        }
    }

    /// Whether the turn still has work to do (pending or running).
    pub fn is_open(self) -> bool {
        matches!(self, TurnStatus::Pending | TurnStatus::Running)
    }
}

/// Who accepted a turn, and on whose behalf.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnOrigin {
    /// The agent that will answer.
    pub agent: String,
    /// The process that owns the turn while it is open; start-up leaves
    /// open turns of live processes alone.
    pub owner_pid: u32,
    /// The chat platform's id of the message (a Telegram update id, a
    /// Slack event id): a second message with the same id in the session
    /// is refused with [`Error::Duplicate`](crate::Error::Duplicate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// Who sent the message; a turn rerun after a restart keeps its
    /// sender's rights.
    #[serde(default)]
    pub principal: Principal,
}

/// One accepted inbound message and its turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub id: TurnId,
    pub session: SessionKey,
    pub status: TurnStatus,
    /// The message as accepted.
    pub content: Vec<ContentBlock>,
    pub origin: TurnOrigin,
    /// The message's sequence number in the history, once started.
    pub message_seq: Option<u64>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub updated_at: i64,
}

/// A session's messages and history, its summary and metadata, and the
/// tool outputs kept apart from its history.
///
/// Sequence numbers are unique across the store and never reused, also
/// after a reset or a compaction; a session's history is ordered by its
/// own position, which compaction may give to new (higher-numbered)
/// messages, so read the order from the history, not from the numbers.
#[async_trait]
pub trait Conversations: Send + Sync {
    /// Adds messages to the end of a session, creating it if needed. All or
    /// none of them are stored. Returns their sequence numbers.
    async fn append(&self, key: &SessionKey, messages: &[Message]) -> Result<Vec<u64>>;

    /// The whole history of a session, in order; empty if unknown.
    async fn history(&self, key: &SessionKey) -> Result<Vec<StoredMessage>>;

    /// The messages appended after sequence number `after` (a cursor from
    /// an earlier read), in history order. What compaction wrote in place
    /// of older messages (a summary) is not among them, though its number
    /// is newer: it restates what a reader of the cursor saw already. A
    /// whole or paged read starts with it.
    async fn history_since(&self, key: &SessionKey, after: u64) -> Result<Vec<StoredMessage>>;

    /// One page of history, in order: the last `limit` messages before
    /// the message numbered `before` (or the last `limit` when `None`).
    /// Fails with [`Error::UnknownMessage`](crate::Error::UnknownMessage)
    /// when `before` is not in this session's history.
    async fn history_page(
        &self,
        key: &SessionKey,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>>;

    /// Every session, most recently updated first (the store keeps
    /// `updated_at` strictly increasing across changes, so the order is
    /// exact even within a millisecond).
    async fn list(&self) -> Result<Vec<SessionInfo>>;

    /// One session's summary, if it exists.
    async fn info(&self, key: &SessionKey) -> Result<Option<SessionInfo>>;

    /// Deletes a session, its history, metadata and turns. Returns whether
    /// it existed. Usage records stay.
    async fn clear(&self, key: &SessionKey) -> Result<bool>;

    /// Replaces the history up to and including message `upto` with
    /// `replacement`, in one transaction (compaction): messages appended
    /// after `upto` are kept, after the replacement. Readers see the old
    /// or the new history, never a mix. Fails with
    /// [`Error::UnknownMessage`](crate::Error::UnknownMessage) when `upto`
    /// is not in this session's history.
    async fn replace_history(
        &self,
        key: &SessionKey,
        upto: u64,
        replacement: &[Message],
    ) -> Result<Vec<u64>>;

    /// The session's metadata; the default when the session is unknown.
    async fn metadata(&self, key: &SessionKey) -> Result<SessionMeta>;

    /// Replaces the session's metadata, creating the session if needed;
    /// leaves its taint alone.
    async fn set_metadata(&self, key: &SessionKey, meta: &SessionMeta) -> Result<()>;

    /// Records what brought untrusted content into the session, or (with
    /// `None`) that it holds none any more; creates the session if needed.
    async fn set_taint(&self, key: &SessionKey, taint: Option<&str>) -> Result<()>;

    /// Keeps a whole tool output of a session, by the call's id (the model
    /// was shown a summary). Storing the same output again changes
    /// nothing; another output under a call id already kept fails with
    /// [`Error::ToolOutputTaken`](crate::Error::ToolOutputTaken) and the
    /// kept one stays.
    async fn put_tool_output(&self, key: &SessionKey, output: &ToolOutput) -> Result<()>;

    /// A tool output kept with [`put_tool_output`](Self::put_tool_output).
    async fn tool_output(&self, key: &SessionKey, call_id: &str) -> Result<Option<ToolOutput>>;

    /// Deletes every session last active before `before` (milliseconds
    /// since the epoch) with its messages, turns and kept tool outputs,
    /// unless it has a turn still pending or running; returns the keys
    /// deleted. Usage rows stay (spending stays accountable).
    async fn prune_idle(&self, before: i64) -> Result<Vec<SessionKey>>;

    /// Finishes the writes already queued and closes the store's
    /// connections; calls after it fail. A SQLite store checkpoints its
    /// write-ahead log as its last connection closes, so the next process
    /// to open the file has no log to replay. A store with nothing to
    /// close keeps this default.
    async fn close(&self) {}
}

/// The durable inbox: accepted messages as turns, their progress and
/// delivery, and the messages a turn adds to the history.
#[async_trait]
pub trait Turns: Send + Sync {
    /// Adds a model's answer and the usage it cost in one transaction, so
    /// a paid-for answer is never recorded without its usage, nor usage
    /// without its answer.
    async fn append_answer(
        &self,
        key: &SessionKey,
        turn: Option<TurnId>,
        message: &Message,
        usage: &UsageRecord,
    ) -> Result<u64>;

    /// Adds a turn's last answer with its usage and records the turn as
    /// completed, all in one transaction: [`append_answer`] and
    /// [`finish_turn`] with [`TurnStatus::Completed`] at the cost of one
    /// commit. A turn no longer in the store (its session was cleared
    /// meanwhile) is left unfinished, as `finish_turn` would fail on it;
    /// the answer is kept either way. The default runs the two one after
    /// the other.
    ///
    /// [`append_answer`]: Self::append_answer
    /// [`finish_turn`]: Self::finish_turn
    async fn append_last_answer(
        &self,
        key: &SessionKey,
        turn: TurnId,
        message: &Message,
        usage: &UsageRecord,
    ) -> Result<u64> {
        let seq = self.append_answer(key, Some(turn), message, usage).await?;
        match self.finish_turn(turn, TurnStatus::Completed).await {
            Ok(()) | Err(crate::Error::UnknownTurn { .. }) => Ok(seq),
            Err(error) => Err(error),
        }
    }

    /// Like [`append`](Conversations::append), marking the messages as the turn's.
    async fn append_for_turn(
        &self,
        key: &SessionKey,
        turn: TurnId,
        messages: &[Message],
    ) -> Result<Vec<u64>>;

    /// Accepts an inbound message: stores it durably as a pending turn,
    /// creating the session if needed, and records the key's channel as
    /// the session's last channel. Its message joins the history only when
    /// the turn starts.
    async fn accept(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord>;

    /// Starts a pending turn: appends its message to the history and marks
    /// it running, in one transaction. Returns the message's sequence
    /// number. Starting a running turn again (a rerun after a crash)
    /// returns the sequence number it already has. `owner_pid` becomes the
    /// turn's owner. Fails with
    /// [`Error::UnknownTurn`](crate::Error::UnknownTurn) for a turn the
    /// store does not have (its session may have been reset) and
    /// [`Error::TurnFinished`](crate::Error::TurnFinished) for one that
    /// has ended.
    async fn start_turn(&self, turn: TurnId, owner_pid: u32) -> Result<u64>;

    /// Accepts a message and starts its turn at once: [`accept`] and
    /// [`start_turn`] (with the origin's `owner_pid`) in one transaction,
    /// at the cost of one commit. For a message that finds its session
    /// idle, with no turn waiting before it. The record is the running
    /// turn's, its `message_seq` set.
    ///
    /// The default runs the two one after the other. When the start fails
    /// there, the message stays accepted and the record says `pending`:
    /// the turn is started later, as any accepted message is.
    ///
    /// [`accept`]: Self::accept
    /// [`start_turn`]: Self::start_turn
    async fn accept_and_start(
        &self,
        key: &SessionKey,
        content: &[ContentBlock],
        origin: &TurnOrigin,
    ) -> Result<TurnRecord> {
        let mut record = self.accept(key, content, origin).await?;
        if let Ok(seq) = self.start_turn(record.id, origin.owner_pid).await {
            record.status = TurnStatus::Running;
            record.message_seq = Some(seq);
        }
        Ok(record)
    }

    /// Sets a turn's status (`completed`, `failed`...). Fails with
    /// [`Error::UnknownTurn`](crate::Error::UnknownTurn) for a turn the
    /// store does not have.
    async fn finish_turn(&self, turn: TurnId, status: TurnStatus) -> Result<()>;

    /// One turn, if it exists.
    async fn turn(&self, turn: TurnId) -> Result<Option<TurnRecord>>;

    /// Every pending or running turn, of one session or (with `None`) of
    /// every session, oldest first.
    async fn open_turns(&self, session: Option<&SessionKey>) -> Result<Vec<TurnRecord>>;

    /// Records that a chat message's turn has its outcome (answer, error
    /// or interruption note) handed to its channel: the outbox's "sent".
    /// Quick (it does not wait for the database's writer), and harmless
    /// for a turn marked before or one the store does not have.
    async fn mark_delivered(&self, turn: TurnId) -> Result<()>;

    /// The outbox: finished turns of chat messages (turns with an external
    /// id) last updated at or after `since` (Unix milliseconds) whose
    /// outcome was never handed to their channel, because the process
    /// stopped in between. Oldest first.
    async fn undelivered_turns(&self, since: i64) -> Result<Vec<TurnRecord>>;
}

/// What model calls used and cost: a record per call, and reports summed
/// over them.
#[async_trait]
pub trait UsageLog: Send + Sync {
    /// Records one model call's usage.
    async fn record_usage(&self, record: &UsageRecord) -> Result<()>;

    /// Usage per tier, over one session or (with `None`) every session.
    /// Tiers without calls are left out.
    async fn usage_by_tier(&self, session: Option<&SessionKey>) -> Result<Vec<(Tier, UsageTotal)>>;

    /// Usage per tier and purpose, over one session or (with `None`) every
    /// session, ordered by tier then purpose. Pairs without calls are left
    /// out.
    async fn usage_by_purpose(&self, session: Option<&SessionKey>) -> Result<Vec<UsageLine>>;

    /// Usage per UTC day and tier from `since` (Unix milliseconds) on,
    /// over every session, ordered by day then tier.
    async fn usage_by_day(&self, since: i64) -> Result<Vec<DayUsage>>;
}

/// Which chat senders pairing let in (and which of them are owners), and
/// the codes waiting for the owner's approval.
#[async_trait]
pub trait Pairing: Send + Sync {
    /// Whether `sender` was let in on `channel` by pairing.
    async fn peer_approved(&self, channel: &str, sender: &str) -> Result<bool>;

    /// Whether a paired `sender` on `channel` was promoted to owner.
    async fn peer_owner(&self, channel: &str, sender: &str) -> Result<bool>;

    /// Promotes a paired sender to owner (or back to guest). Returns
    /// whether the sender was paired.
    async fn set_peer_owner(&self, channel: &str, sender: &str, owner: bool) -> Result<bool>;

    /// The code to show an unknown sender: their pending one, or a new
    /// one valid for `ttl_ms` (dropping expired codes). A channel with
    /// [`MAX_PENDING`](crate::pairing::MAX_PENDING) codes waiting refuses
    /// new ones with [`PairingError::Full`] (as
    /// [`Error::Pairing`](crate::Error::Pairing)).
    async fn pairing_request(
        &self,
        channel: &str,
        sender: &str,
        name: Option<&str>,
        now: i64,
        ttl_ms: i64,
    ) -> Result<PairingTicket>;

    /// Approves a pending code: its sender is let in from now on.
    /// Returns the approved sender, or why the code cannot be approved.
    async fn pairing_approve(
        &self,
        channel: &str,
        code: &str,
        now: i64,
    ) -> Result<Result<ApprovedPeer, PairingError>>;

    /// Codes waiting for the owner at `now`, oldest first.
    async fn pairing_pending(&self, now: i64) -> Result<Vec<PendingPairing>>;

    /// Senders approved by pairing, by channel then time.
    async fn approved_peers(&self) -> Result<Vec<ApprovedPeer>>;

    /// Takes a sender's approval back. Returns whether there was one.
    async fn revoke_peer(&self, channel: &str, sender: &str) -> Result<bool>;
}

/// The cron jobs agents created, and what is kept about every job's runs.
#[async_trait]
pub trait Jobs: Send + Sync {
    /// The cron jobs agents created, by name.
    async fn cron_jobs(&self) -> Result<Vec<StoredCronJob>>;

    /// Stores a cron job an agent created, its runs counted from
    /// `created_at`, in one transaction. Returns false, storing nothing,
    /// when a stored job already has its name.
    async fn add_cron_job(&self, job: &StoredCronJob) -> Result<bool>;

    /// Deletes an agent-created cron job and what is kept about its runs.
    /// Returns whether it existed.
    async fn remove_cron_job(&self, name: &str) -> Result<bool>;

    /// What is kept about every job's runs, by kind then name.
    async fn job_runs(&self) -> Result<Vec<JobRuns>>;

    /// Counts a job's runs from `since` unless they are counted already;
    /// returns what is kept about them.
    async fn track_job(&self, kind: JobKind, name: &str, since: i64) -> Result<JobRuns>;

    /// Records a job's latest run (when it starts, and again when it
    /// ends), counting its runs from the run's start if they were not
    /// counted yet.
    async fn record_run(&self, kind: JobKind, name: &str, run: &LastRun) -> Result<()>;

    /// Where a job that reads a source stopped (a Gmail watch's place in
    /// its mailbox's history), as it wrote it; `None` before it kept one.
    async fn job_cursor(&self, kind: JobKind, name: &str) -> Result<Option<String>>;

    /// Keeps a job's cursor, counting its runs from `now` if they were
    /// not counted yet.
    async fn set_job_cursor(&self, kind: JobKind, name: &str, cursor: &str, now: i64)
    -> Result<()>;
}

/// A file a turn sent to its chat, as kept (without its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub session: SessionKey,
    /// The turn that sent it; `None` for a file sent outside a turn.
    pub turn: Option<TurnId>,
    pub file: MediaFile,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Whether it was handed to its chat (sent, or refused and the chat
    /// told): the outbox's mark, as [`Turns::mark_delivered`] is for
    /// answers.
    pub sent: bool,
}

/// The files turns send to their chats (`media.send`, `voice.say`):
/// kept in the store, so any process sharing it can send or serve them,
/// and one that dies before sending them leaves them to the next.
#[async_trait]
pub trait Files: Send + Sync {
    /// Keeps `file` (its `id` new, its `size` the length of `data`), sent
    /// by `turn` of `session`.
    async fn keep_file(
        &self,
        session: &SessionKey,
        turn: Option<TurnId>,
        file: &MediaFile,
        data: &[u8],
    ) -> Result<()>;

    /// The file kept under `id`, with its bytes.
    async fn file(&self, id: &str) -> Result<Option<(StoredFile, Vec<u8>)>>;

    /// The files `turns` of `session` sent, oldest first, without bytes.
    async fn files_of_turns(
        &self,
        session: &SessionKey,
        turns: &[TurnId],
    ) -> Result<Vec<StoredFile>>;

    /// Records that a file was handed to its chat.
    async fn mark_file_sent(&self, id: &str) -> Result<()>;

    /// The outbox's files: those turns of chat messages (turns with an
    /// external id) sent since `since` that never reached their chat,
    /// oldest first, without bytes.
    async fn unsent_files(&self, since: i64) -> Result<Vec<StoredFile>>;

    /// Removes the files kept before `before`; returns how many.
    async fn prune_files(&self, before: i64) -> Result<u64>;
}

/// Everything a session needs; a backend implements the six concern
/// traits ([`Conversations`], [`Turns`], [`UsageLog`], [`Pairing`],
/// [`Jobs`] and [`Files`]) and gets this one.
///
/// Code that calls a method imports the trait that holds it; code that
/// needs one concern only can take that trait instead (an
/// `Arc<dyn SessionStore>` upcasts to `Arc<dyn Pairing>`, say).
pub trait SessionStore: Conversations + Turns + UsageLog + Pairing + Jobs + Files {}

impl<T: Conversations + Turns + UsageLog + Pairing + Jobs + Files + ?Sized> SessionStore for T {}
