//! One session's lane: the task that owns the session's state, accepts
//! its messages in arrival order and runs its turns one after another.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flynn_protocol::config::{InterruptedTurns, ModelRef};
use flynn_protocol::{
    AgentEvent, ContentBlock, Message, Principal, RecoveryAction, Role, RunState, SessionKey, Tier,
    TurnId, TurnOutcome,
};
use flynn_sessions::{Lease, NodeId, SessionMeta, TurnOrigin, TurnOwner, TurnRecord, TurnStatus};
use flynn_tools::{Approver, DenyAll};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agents::AgentProfile;
use crate::commands::Command;
use crate::events::TurnPublisher;
use crate::runtime::{
    LaneHandle, Lineage, Running, Shared, Submitted, TurnHandle, TurnRequest, lock,
};
use crate::turn::{self, TurnJob};
use crate::{Error, Result};

mod commands;

/// What a lane is asked to do.
pub(crate) enum LaneOp {
    /// Accept a message as a turn.
    Submit {
        request: Box<TurnRequest>,
        accepted: oneshot::Sender<Result<TurnHandle>>,
    },
    /// Answer a chat command.
    Command {
        command: Command,
        /// Who sent it: guests may not vouch for content, and pick only
        /// among the agents routed to them and the models their agent
        /// lists.
        principal: Principal,
        reply: oneshot::Sender<Result<Submitted>>,
    },
    /// Empty the session: the running turn is cancelled (and waited
    /// for), waiting turns are dropped, then the history is cleared.
    /// Answers whether the session had anything.
    Reset { done: oneshot::Sender<Result<bool>> },
    /// Drop a turn that is still waiting.
    CancelQueued {
        turn: TurnId,
        done: oneshot::Sender<bool>,
    },
    /// Answered once the lane has recovered its session's open turns,
    /// with what it did with each (given once).
    Recovered {
        done: oneshot::Sender<Vec<RecoveredTurn>>,
    },
    /// From another node of the cluster (see [`crate::cluster`]).
    Cluster(ClusterOp),
}

/// What another node of the cluster tells a lane.
pub(crate) enum ClusterOp {
    /// A message was accepted for this session elsewhere, for this
    /// node (the lease holder) to run.
    Accepted,
    /// The session's holder gave its lease back (or died): a lane with
    /// turns waiting may take it.
    Released,
    /// The session's settings changed on another node: read them again.
    Settings,
    /// A turn this lane accepted ended on the node that ran it.
    Ended {
        turn: TurnId,
        result: Box<Result<TurnOutcome>>,
    },
}

/// Whether this lane runs its session's turns.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// No cluster: it runs every turn it is given.
    Solo,
    /// In a cluster, before the session is loaded.
    Unknown,
    /// It holds the session's lease.
    Holder,
    /// Another node holds it: messages are accepted here and run there.
    Follower(NodeId),
}

/// A turn a previous process left unfinished, as its lane recovered it.
#[derive(Debug)]
pub struct RecoveredTurn {
    pub session: SessionKey,
    pub turn: TurnId,
    pub action: Recovery,
}

/// What recovery did with an unfinished turn
/// (`sessions.interrupted_turns`).
#[derive(Debug)]
pub enum Recovery {
    /// Reported: `note` was stored in the history, for the sender to be
    /// told as well.
    Reported { note: String },
    /// Run again: its outcome, for whoever should hear the answer.
    Rerun(TurnHandle),
}

/// How often a follower with turns waiting checks on them and on the
/// session's lease.
const FOLLOW_TICK: Duration = Duration::from_secs(1);
/// A follower tells the holder again about its waiting turns every so
/// many ticks, in case the signal was missed.
const RESIGNAL_TICKS: u32 = 5;

/// Times a lane tries to load its session before it runs turns anyway.
const LOAD_ATTEMPTS: u32 = 5;
/// The first wait between two attempts; each next one doubles.
const LOAD_RETRY: Duration = Duration::from_secs(1);

/// A turn waiting for its lane.
struct Queued {
    record: TurnRecord,
    tier: Option<Tier>,
    model: Option<ModelRef>,
    approver: Option<Arc<dyn Approver>>,
    lineage: Lineage,
    /// Its message is in the history and the turn is this process's
    /// (`Turns::accept_and_start`): the turn needs no start of its own.
    started: bool,
    /// Where the outcome goes; `None` for a turn rerun after a restart.
    outcome: Option<oneshot::Sender<Result<TurnOutcome>>>,
}

impl Queued {
    /// A turn found in the store (recovered, or accepted on another
    /// node): run with the session's settings, `outcome` told its end.
    fn stored(record: TurnRecord, outcome: Option<oneshot::Sender<Result<TurnOutcome>>>) -> Queued {
        Queued {
            record,
            tier: None,
            model: None,
            approver: None,
            lineage: Lineage::default(),
            started: false,
            outcome,
        }
    }
}

pub(crate) struct Lane {
    shared: Arc<Shared>,
    key: SessionKey,
    handle: LaneHandle,
    rx: mpsc::Receiver<LaneOp>,
    queue: VecDeque<Queued>,
    /// The running turn's task, or the `/compact` running in its place:
    /// turns wait for either.
    running: Option<JoinHandle<()>>,
    /// Cancels the `/compact` in `running`, when that is what runs.
    compacting: Option<CancellationToken>,
    meta: SessionMeta,
    /// Failed attempts to load the session (metadata and open turns);
    /// `None` once loaded. Turns wait for it, up to [`LOAD_ATTEMPTS`].
    load_failures: Option<u32>,
    /// What recovery did, until [`LaneOp::Recovered`] asks.
    recovered: Vec<RecoveredTurn>,
    /// What tainted the session (`SessionMeta::taint`), shared with its
    /// running turn, which records new taint here and in the store.
    taint: Arc<Mutex<Option<String>>>,
    /// Whether it runs the session's turns (in a cluster: holds its lease).
    role: Place,
    /// Turns this lane accepted for another node to run, with whoever
    /// waits for their outcome.
    awaiting: BTreeMap<TurnId, oneshot::Sender<Result<TurnOutcome>>>,
    /// Follower ticks since the holder was last told of waiting turns.
    ticks: u32,
}

impl Lane {
    pub(crate) fn new(
        shared: Arc<Shared>,
        key: SessionKey,
        handle: LaneHandle,
        rx: mpsc::Receiver<LaneOp>,
    ) -> Self {
        let shared_has_cluster = shared.cluster.is_some();
        Lane {
            shared,
            key,
            handle,
            rx,
            queue: VecDeque::new(),
            running: None,
            compacting: None,
            meta: SessionMeta::default(),
            load_failures: Some(0),
            recovered: Vec::new(),
            taint: Arc::default(),
            role: if shared_has_cluster {
                Place::Unknown
            } else {
                Place::Solo
            },
            awaiting: BTreeMap::new(),
            ticks: 0,
        }
    }

    pub(crate) async fn run(mut self) {
        self.try_load().await;
        loop {
            if self.running.is_none() && self.may_start() {
                self.start_next().await;
            }
            let idle = self.running.is_none() && self.queue.is_empty() && self.awaiting.is_empty();
            let following = !self.awaiting.is_empty() && matches!(self.role, Place::Follower(_));
            let retry = self.load_retry();
            tokio::select! {
                biased;
                () = self.shared.shutdown.cancelled() => {
                    self.stop().await;
                    self.shared.forget(&self.key, self.handle.generation);
                    break;
                }
                () = wait(&mut self.running) => {
                    self.running = None;
                    self.compacting = None;
                    *lock(&self.handle.current) = None;
                }
                () = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => {
                    self.try_load().await;
                }
                () = tokio::time::sleep(FOLLOW_TICK), if following => {
                    self.follow().await;
                }
                op = self.rx.recv() => match op {
                    Some(op) => self.handle(op).await,
                    None => break,
                },
                () = tokio::time::sleep(self.shared.lane_idle), if idle => {
                    if self.shared.retire(&self.key, self.handle.generation, !self.rx.is_empty()) {
                        self.rx.close();
                        self.release_lease().await;
                        self.forward_leftovers().await;
                        break;
                    }
                }
            }
        }
    }

    /// Operations that reached the lane while it retired go to its
    /// successor.
    async fn forward_leftovers(&mut self) {
        while let Some(op) = self.rx.recv().await {
            if let Err(error) = self.shared.send(&self.key, op).await {
                tracing::warn!(session = %self.key, %error, "an operation was dropped");
            }
        }
    }

    /// Cancels the running turn and waits for it; waiting turns stay
    /// accepted (pending) for the next start to recover.
    async fn stop(&mut self) {
        self.end_running().await;
        for (_, outcome) in std::mem::take(&mut self.awaiting) {
            let _ = outcome.send(Err(Error::ShuttingDown));
        }
        for queued in self.queue.drain(..) {
            if let Some(outcome) = queued.outcome {
                let _ = outcome.send(Err(Error::ShuttingDown));
            }
        }
        self.rx.close();
        while let Ok(op) = self.rx.try_recv() {
            refuse(op, Error::ShuttingDown);
        }
    }

    /// Loads the session, counting a failure; turns wait for the load
    /// (so recovered turns run before newer ones) until it succeeds or
    /// has failed [`LOAD_ATTEMPTS`] times.
    async fn try_load(&mut self) {
        let Some(failures) = self.load_failures else {
            return;
        };
        match self.load().await {
            Ok(()) => self.load_failures = None,
            Err(error) => {
                let failures = failures + 1;
                self.load_failures = Some(failures);
                let what = if failures < LOAD_ATTEMPTS {
                    format!("trying again in {} s", retry_wait(failures).as_secs())
                } else {
                    "giving up: new messages run, unfinished earlier ones wait for the next start"
                        .to_owned()
                };
                tracing::error!(session = %self.key, %error, attempt = failures, "cannot load the session; {what}");
                self.warn(
                    None,
                    format!("cannot load session {}: {error}; {what}", self.key),
                );
            }
        }
    }

    /// Whether turns may start: the session is loaded, or loading it has
    /// failed too often to wait longer.
    fn may_start(&self) -> bool {
        self.load_failures
            .is_none_or(|failures| failures >= LOAD_ATTEMPTS)
    }

    /// How long until the next attempt to load the session, if one is due.
    fn load_retry(&self) -> Option<Duration> {
        self.load_failures
            .filter(|failures| (1..LOAD_ATTEMPTS).contains(failures))
            .map(retry_wait)
    }

    async fn load(&mut self) -> Result<()> {
        self.meta = self.shared.store.metadata(&self.key).await?;
        *lock(&self.taint) = self.meta.taint.clone();
        if let Some(cluster) = &self.shared.cluster {
            match cluster.acquire(&self.key).await? {
                Lease::Held => self.role = Place::Holder,
                // The holder recovers what needs it.
                Lease::HeldBy(node) => {
                    self.role = Place::Follower(node);
                    return Ok(());
                }
            }
        }
        self.recover().await
    }

    /// Gives the session's lease back, if this lane holds it.
    async fn release_lease(&mut self) {
        if self.role != Place::Holder {
            return;
        }
        if let Some(cluster) = &self.shared.cluster
            && let Err(error) = cluster.release(&self.key).await
        {
            tracing::warn!(session = %self.key, %error, "cannot give the session's lease back; other nodes take it once this one stops");
        }
        self.role = Place::Unknown;
    }

    /// A follower's tick: hands out the outcomes of waiting turns that
    /// ended without their events reaching this node, takes the lease if
    /// its holder gave it back or died, and now and then tells the holder
    /// again that turns wait.
    async fn follow(&mut self) {
        let Some(cluster) = self.shared.cluster.clone() else {
            return;
        };
        let waiting: Vec<TurnId> = self.awaiting.keys().copied().collect();
        for turn in waiting {
            match self.shared.store.turn(turn).await {
                Ok(Some(record)) => {
                    if let Some(result) =
                        crate::cluster::stored_outcome(&self.shared, &record).await
                        && let Some(outcome) = self.awaiting.remove(&turn)
                    {
                        let _ = outcome.send(result);
                    }
                }
                // Its session was reset meanwhile.
                Ok(None) => {
                    if let Some(outcome) = self.awaiting.remove(&turn) {
                        let _ = outcome.send(Err(Error::Cancelled));
                    }
                }
                Err(error) => {
                    tracing::warn!(session = %self.key, %turn, %error, "cannot check a turn another node runs");
                }
            }
        }
        if self.awaiting.is_empty() {
            return;
        }
        self.take_over(&*cluster).await;
    }

    /// Takes the session's lease if it is free (then recovers and runs
    /// what waits), else makes sure the holder knows turns wait.
    async fn take_over(&mut self, cluster: &dyn flynn_sessions::Cluster) {
        match cluster.acquire(&self.key).await {
            Ok(Lease::Held) => {
                self.role = Place::Holder;
                self.ticks = 0;
                if let Err(error) = self.recover().await {
                    // Loaded again (and recovered) through the retries.
                    tracing::warn!(session = %self.key, %error, "cannot take over the session's waiting turns; trying again");
                    self.load_failures = Some(1);
                }
            }
            Ok(Lease::HeldBy(node)) => {
                let changed = self.role != Place::Follower(node.clone());
                self.role = Place::Follower(node.clone());
                self.ticks += 1;
                if changed || self.ticks >= RESIGNAL_TICKS {
                    self.ticks = 0;
                    self.tell_holder(cluster, node).await;
                }
            }
            Err(error) => {
                tracing::warn!(session = %self.key, %error, "cannot check who runs the session");
            }
        }
    }

    async fn tell_holder(&self, cluster: &dyn flynn_sessions::Cluster, holder: NodeId) {
        let signal = flynn_sessions::Signal::Accepted {
            session: self.key.clone(),
            to: holder,
        };
        if let Err(error) = cluster.signal(signal).await {
            tracing::warn!(session = %self.key, %error, "cannot tell the session's node that a message waits; it is told again shortly");
        }
    }

    /// On a follower, `/reset` is the holder's to do (its turn running, its
    /// queue, its cached session): it is asked, and this says whether the
    /// session had anything. `None` when this lane runs the session.
    pub(super) async fn reset_on_holder(&mut self) -> Result<Option<bool>> {
        let (Place::Follower(_), Some(cluster)) = (&self.role, self.shared.cluster.clone()) else {
            return Ok(None);
        };
        let existed = self.shared.store.info(&self.key).await?.is_some();
        cluster
            .signal(flynn_sessions::Signal::Reset {
                session: self.key.clone(),
            })
            .await?;
        Ok(Some(existed))
    }

    /// The holder lost its lease (it went silent too long and another
    /// node took the session): what waits here is run there.
    async fn lose_lease(&mut self) {
        let Some(cluster) = self.shared.cluster.clone() else {
            return;
        };
        tracing::warn!(session = %self.key, "this node no longer holds the session; its waiting turns run on the node that does");
        for queued in self.queue.drain(..) {
            if let Some(outcome) = queued.outcome {
                self.awaiting.insert(queued.record.id, outcome);
            }
        }
        self.role = Place::Unknown;
        self.take_over(&*cluster).await;
    }

    /// Reports or reruns the turns a previous process left open.
    ///
    /// In a cluster (this lane holding the lease) it also takes in the
    /// turns other nodes accepted for it, and what a node that stopped
    /// left open; turns run in the order the session accepted them.
    async fn recover(&mut self) -> Result<()> {
        let store = self.shared.store.clone();
        let running = lock(&self.handle.current).as_ref().map(|r| r.turn);
        let open = store.open_turns(Some(&self.key)).await?;
        let owners = match &self.shared.cluster {
            Some(cluster) if !open.is_empty() => Some(cluster.turn_owners(&self.key).await?),
            _ => None,
        };
        // Rerun turns go before what the lane accepted meanwhile.
        let mut rerun: VecDeque<Queued> = VecDeque::new();
        for record in open {
            // A retried load meets the turns this lane accepted meanwhile,
            // and those an earlier attempt queued.
            if running == Some(record.id) || self.queue.iter().any(|q| q.record.id == record.id) {
                continue;
            }
            match &owners {
                None => {
                    let owner = record.origin.owner_pid;
                    if owner != self.shared.pid && process_alive(owner) {
                        // Another live process is running it.
                        continue;
                    }
                }
                Some(owners) => {
                    let owner = owners.get(&record.id).copied().unwrap_or(TurnOwner::Gone);
                    match (owner, record.status) {
                        // Accepted by a live node (this one or another) for
                        // the holder to run: it runs now, as any message.
                        (TurnOwner::This | TurnOwner::Alive, TurnStatus::Pending) => {
                            let outcome = self.awaiting.remove(&record.id);
                            rerun.push_back(Queued::stored(record, outcome));
                            continue;
                        }
                        // Running on a live node (its lease lapsed while
                        // it ran): left to finish there.
                        (TurnOwner::This | TurnOwner::Alive, _) => continue,
                        (TurnOwner::Gone, _) => {}
                    }
                }
            }
            let was_running = record.status == TurnStatus::Running;
            if was_running {
                self.close_cut_off_calls(record.id).await?;
            }
            let preview = preview(&record.content);
            match self.shared.interrupted_turns {
                InterruptedTurns::Report => {
                    // A pending turn's message joins the history here.
                    match store.start_turn(record.id, self.shared.pid).await {
                        Ok(_) => {}
                        // In a cluster, a turn accepted earlier by a live
                        // node waits before this one: this one waits too,
                        // and runs.
                        Err(flynn_sessions::Error::NotNext { .. }) => {
                            rerun.push_back(Queued::stored(record, None));
                            continue;
                        }
                        Err(error) => return Err(error.into()),
                    }
                    let note = format!(
                        "⚠ Interrupted: Flynn stopped before it finished answering \"{preview}\". Nothing more was done; send the message again if you still want it."
                    );
                    store
                        .append_for_turn(&self.key, record.id, &[Message::assistant(note.clone())])
                        .await?;
                    store
                        .finish_turn(record.id, TurnStatus::Interrupted)
                        .await?;
                    self.publish(
                        Some(record.id),
                        AgentEvent::Interrupted {
                            turn: record.id,
                            action: RecoveryAction::Reported,
                            message: format!(
                                "an earlier turn in {} (\"{preview}\") was interrupted before it finished; its message is kept in the history",
                                self.key
                            ),
                        },
                    );
                    match self.awaiting.remove(&record.id) {
                        // A caller on this node waits for it (it was
                        // accepted here and ran on a node that died).
                        Some(outcome) => {
                            let _ = outcome.send(Err(Error::Interrupted(format!(
                                "the node running it stopped before it finished answering \"{preview}\"; its message is kept in the history"
                            ))));
                        }
                        None => self.note_recovered(RecoveredTurn {
                            session: self.key.clone(),
                            turn: record.id,
                            action: Recovery::Reported { note },
                        }),
                    }
                }
                InterruptedTurns::Rerun => {
                    self.publish(
                        Some(record.id),
                        AgentEvent::Interrupted {
                            turn: record.id,
                            action: RecoveryAction::Rerun,
                            message: format!(
                                "an earlier turn in {} (\"{preview}\") was interrupted; running it again",
                                self.key
                            ),
                        },
                    );
                    // A caller on this node waiting for it hears the rerun.
                    let tx = match self.awaiting.remove(&record.id) {
                        Some(waiting) => waiting,
                        None => {
                            let (tx, rx) = oneshot::channel();
                            self.note_recovered(RecoveredTurn {
                                session: self.key.clone(),
                                turn: record.id,
                                action: Recovery::Rerun(TurnHandle {
                                    turn: record.id,
                                    session: self.key.clone(),
                                    outcome: rx,
                                }),
                            });
                            tx
                        }
                    };
                    rerun.push_back(Queued::stored(record, Some(tx)));
                }
            }
        }
        rerun.extend(self.queue.drain(..));
        if owners.is_some() {
            // Acceptance order, across the nodes that accepted them.
            rerun
                .make_contiguous()
                .sort_by_key(|queued| queued.record.id);
        }
        self.queue = rerun;
        Ok(())
    }

    /// Keeps what recovery did for whoever tells the senders: handed at
    /// once to [`SessionManager::recovered_later`]'s receiver when one is
    /// installed (a recovery at any time, such as taking over a dead
    /// node's session), else kept for [`LaneOp::Recovered`].
    ///
    /// [`SessionManager::recovered_later`]: crate::SessionManager::recovered_later
    fn note_recovered(&mut self, recovered: RecoveredTurn) {
        let sink = lock(&self.shared.recovery_sink).clone();
        let recovered = match sink {
            Some(sink) => match sink.send(recovered) {
                Ok(()) => return,
                Err(mpsc::error::SendError(recovered)) => recovered,
            },
            None => recovered,
        };
        self.recovered.push(recovered);
    }

    /// A turn cut off while its tools ran left an assistant message whose
    /// calls have no results: store "interrupted" results for them, so the
    /// stored history is one providers accept.
    async fn close_cut_off_calls(&self, turn: TurnId) -> Result<()> {
        let store = &self.shared.store;
        let history = store.history_page(&self.key, None, 1).await?;
        let Some(last) = history.last() else {
            return Ok(());
        };
        if last.message.role != Role::Assistant {
            return Ok(());
        }
        let results: Vec<ContentBlock> = last
            .message
            .tool_uses()
            .map(|(id, _, _)| ContentBlock::ToolResult {
                tool_use_id: id.to_owned(),
                content: flynn_context::INTERRUPTED_RESULT.to_owned(),
                is_error: true,
            })
            .collect();
        if results.is_empty() {
            return Ok(());
        }
        store
            .append_for_turn(
                &self.key,
                turn,
                &[Message {
                    role: Role::User,
                    content: results,
                }],
            )
            .await?;
        Ok(())
    }

    async fn handle(&mut self, op: LaneOp) {
        match op {
            LaneOp::Submit { request, accepted } => {
                let result = self.accept(*request).await;
                let ahead =
                    self.queue.len().saturating_sub(1) + usize::from(self.running.is_some());
                let turn = result.as_ref().ok().map(|handle| handle.turn);
                let _ = accepted.send(result);
                if let Some(turn) = turn
                    && ahead > 0
                {
                    self.publish(
                        Some(turn),
                        AgentEvent::Queued {
                            ahead: u32::try_from(ahead).unwrap_or(u32::MAX),
                        },
                    );
                }
            }
            LaneOp::Command {
                command: Command::Compact,
                principal,
                reply,
            } => self.compact(principal.is_owner(), reply).await,
            LaneOp::Command {
                command,
                principal,
                reply,
            } => {
                let name = command.name().to_owned();
                let result = self.command(command, &principal).await;
                answer(&self.handle.events, name, result, reply);
            }
            LaneOp::Reset { done } => {
                let _ = done.send(self.reset().await);
            }
            LaneOp::CancelQueued { turn, done } => {
                let found = self.cancel_queued(|id| id == turn).await;
                let _ = done.send(found > 0);
            }
            LaneOp::Recovered { done } => {
                let _ = done.send(std::mem::take(&mut self.recovered));
            }
            LaneOp::Cluster(op) => self.cluster_op(op).await,
        }
    }

    async fn cluster_op(&mut self, op: ClusterOp) {
        match op {
            ClusterOp::Accepted => {
                if self.role == Place::Holder
                    && self.load_failures.is_none()
                    && let Err(error) = self.recover().await
                {
                    tracing::warn!(session = %self.key, %error, "cannot take in a message another node accepted; it runs with the next one");
                }
            }
            ClusterOp::Released => {
                if matches!(self.role, Place::Follower(_))
                    && !self.awaiting.is_empty()
                    && let Some(cluster) = self.shared.cluster.clone()
                {
                    self.take_over(&*cluster).await;
                }
            }
            ClusterOp::Ended { turn, result } => {
                if let Some(outcome) = self.awaiting.remove(&turn) {
                    let _ = outcome.send(*result);
                }
            }
            ClusterOp::Settings => match self.shared.store.metadata(&self.key).await {
                Ok(meta) => {
                    *lock(&self.taint) = meta.taint.clone();
                    self.meta = meta;
                }
                Err(error) => {
                    tracing::warn!(session = %self.key, %error, "cannot read the settings another node changed; they apply once the session is loaded again");
                }
            },
        }
    }

    /// In a cluster, tells the other nodes that this session's settings
    /// changed, so the one running it uses them from its next turn.
    pub(super) async fn settings_changed(&self) {
        if let Some(cluster) = &self.shared.cluster {
            let signal = flynn_sessions::Signal::Settings {
                session: self.key.clone(),
            };
            if let Err(error) = cluster.signal(signal).await {
                tracing::warn!(session = %self.key, %error, "cannot tell the other nodes about the session's new settings; the node running it sees them once it loads the session again");
            }
        }
    }

    /// On a follower, `/compact` is the holder's to do (it runs the turns
    /// that write the history): it is asked. `false` when this lane runs
    /// the session.
    pub(super) async fn compact_on_holder(&self, extract: bool) -> Result<bool> {
        let (Place::Follower(_), Some(cluster)) = (&self.role, self.shared.cluster.clone()) else {
            return Ok(false);
        };
        cluster
            .signal(flynn_sessions::Signal::Compact {
                session: self.key.clone(),
                extract,
            })
            .await?;
        Ok(true)
    }

    /// Stores the message as a pending turn and queues it.
    async fn accept(&mut self, request: TurnRequest) -> Result<TurnHandle> {
        if self.queue.len() + self.awaiting.len() >= self.shared.queue_limit {
            return Err(Error::QueueFull {
                session: self.key.clone(),
                limit: self.shared.queue_limit,
            });
        }
        let agent = match &request.agent {
            Some(name) => self.shared.agents.lookup(name, "--agent")?.clone(),
            None => self.session_agent().clone(),
        };
        // A turn that could not call any model is refused now, before it
        // leaves anything behind in the session.
        match self.model_choice(&agent, request.tier, request.model.clone()) {
            (_, Some(model)) => self.shared.router.check_model(&model)?,
            (tier, None) => self.shared.router.check_tier(tier)?,
        }
        let agent = agent.name.clone();
        let origin = TurnOrigin {
            agent,
            owner_pid: self.shared.pid,
            external_id: request.external_id.clone(),
            principal: request.principal.clone(),
        };
        // A message that finds the lane idle starts its turn in the same
        // commit: `run` starts the next queued turn before it takes
        // another operation, so nothing can come between the two. An
        // untrusted one is not: the session's taint is recorded below,
        // before its content joins the history.
        let idle = self.queue.is_empty()
            && self.running.is_none()
            && self.may_start()
            && matches!(self.role, Place::Solo | Place::Holder);
        let store = &self.shared.store;
        let record = if idle && request.untrusted.is_none() {
            store
                .accept_and_start(&self.key, &request.content, &origin)
                .await?
        } else {
            store.accept(&self.key, &request.content, &origin).await?
        };
        // `accept` recorded the channel in the store too, and gave an
        // untitled session its title.
        self.meta.last_channel = Some(self.key.channel().to_owned());
        if self.meta.title.is_none() {
            self.meta.title = flynn_sessions::title::from_content(&request.content);
        }
        if let Some(source) = &request.untrusted {
            // A webhook's body: untrusted content from the first word.
            let taint = format!("{source} in turn {}", record.id);
            self.shared.store.set_taint(&self.key, Some(&taint)).await?;
            *lock(&self.taint) = Some(taint);
        }
        let (tx, rx) = oneshot::channel();
        let turn = record.id;
        let started = record.status == TurnStatus::Running;
        if let Place::Follower(holder) = &self.role {
            // The holder runs it; its events bring the outcome here.
            self.awaiting.insert(turn, tx);
            if let Some(cluster) = self.shared.cluster.clone() {
                self.tell_holder(&*cluster, holder.clone()).await;
            }
            return Ok(TurnHandle {
                turn,
                session: self.key.clone(),
                outcome: rx,
            });
        }
        // In a cluster, a message that found the lane idle but was not
        // started at once has turns accepted elsewhere before it.
        let adopt = idle && !started && self.role == Place::Holder;
        self.queue.push_back(Queued {
            record,
            started,
            tier: request.tier,
            model: request.model,
            approver: request.approver,
            lineage: request.lineage,
            outcome: Some(tx),
        });
        if adopt && let Err(error) = self.recover().await {
            tracing::warn!(session = %self.key, %error, "cannot take in the messages other nodes accepted first");
        }
        Ok(TurnHandle {
            turn,
            session: self.key.clone(),
            outcome: rx,
        })
    }

    /// The agent this session talks to when a message names none: the
    /// one chosen with `/agent`, else the one the routes pick.
    fn session_agent(&self) -> &Arc<AgentProfile> {
        self.meta
            .agent
            .as_deref()
            .and_then(|name| self.shared.agents.get(name))
            .unwrap_or_else(|| self.shared.agents.route(&self.key))
    }

    /// Starts the next waiting turn, if any.
    async fn start_next(&mut self) {
        for _ in 0..3 {
            match self.start_in_cluster().await {
                Some(queued) => return self.spawn_turn(queued),
                None if self.role == Place::Holder && self.load_failures.is_none() => {}
                None => return,
            }
        }
    }

    /// The next waiting turn, started in the store first when this lane
    /// holds its session's lease; `None` when there is none, or it cannot
    /// start here yet (turns accepted before it were taken in, or the
    /// lease was lost).
    async fn start_in_cluster(&mut self) -> Option<Queued> {
        let mut queued = self.queue.pop_front()?;
        if self.role == Place::Holder && !queued.started {
            // In a cluster the lane starts the turn itself: the store
            // refuses a turn whose session this node no longer holds, or
            // one that a turn accepted before it (elsewhere) waits for.
            match self
                .shared
                .store
                .start_turn(queued.record.id, self.shared.pid)
                .await
            {
                Ok(_) => queued.started = true,
                Err(flynn_sessions::Error::NotNext { .. }) => {
                    self.queue.push_front(queued);
                    if let Err(error) = self.recover().await {
                        tracing::warn!(session = %self.key, %error, "cannot take in the turns accepted before this one");
                        self.load_failures = Some(1);
                    }
                    return None;
                }
                Err(flynn_sessions::Error::LeaseLost { .. }) => {
                    self.queue.push_front(queued);
                    self.lose_lease().await;
                    return None;
                }
                // The turn reports it as it fails.
                Err(_) => {}
            }
        }
        Some(queued)
    }

    fn spawn_turn(&mut self, queued: Queued) {
        let turn = queued.record.id;
        let agent = self
            .shared
            .agents
            .get(&queued.record.origin.agent)
            .cloned()
            .unwrap_or_else(|| self.session_agent().clone());
        let (tier, model) = self.model_choice(&agent, queued.tier, queued.model.clone());
        let cancel = self.shared.shutdown.child_token();
        let approver = queued.approver.clone().unwrap_or_else(|| {
            Arc::new(DenyAll::new(
                "nobody can be asked to approve it in this session",
            ))
        });
        let job = TurnJob {
            shared: self.shared.clone(),
            session: self.key.clone(),
            turn,
            started: queued.started,
            content: queued.record.content.clone(),
            agent,
            tier,
            model,
            approver,
            principal: queued.record.origin.principal.clone(),
            lineage: queued.lineage.clone(),
            taint: self.taint.clone(),
            events: TurnPublisher {
                channel: self.handle.events.clone(),
                turn,
            },
            cancel: cancel.clone(),
        };
        *lock(&self.handle.current) = Some(Running { turn, cancel });
        let outcome = queued.outcome;
        self.running = Some(self.shared.tracker.spawn(async move {
            let result = turn::run(job).await;
            if let Some(outcome) = outcome {
                let _ = outcome.send(result);
            }
        }));
    }

    /// The tier and model a turn uses: the message's choice, else the
    /// session's (`/model`), else the agent's.
    fn model_choice(
        &self,
        agent: &AgentProfile,
        tier: Option<Tier>,
        model: Option<ModelRef>,
    ) -> (Tier, Option<ModelRef>) {
        if model.is_some() || tier.is_some() {
            return (tier.unwrap_or(agent.tier), model);
        }
        if self.meta.model.is_some() || self.meta.tier.is_some() {
            return (
                self.meta.tier.unwrap_or(agent.tier),
                self.meta.model.clone(),
            );
        }
        (agent.tier, agent.model.clone())
    }

    /// Drops waiting turns that `matches`; each is recorded as cancelled.
    async fn cancel_queued(&mut self, matches: impl Fn(TurnId) -> bool) -> usize {
        let (drop, keep): (VecDeque<Queued>, VecDeque<Queued>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|queued| matches(queued.record.id));
        self.queue = keep;
        let count = drop.len();
        for queued in drop {
            let turn = queued.record.id;
            if let Err(error) = self
                .shared
                .store
                .finish_turn(turn, TurnStatus::Cancelled)
                .await
            {
                tracing::warn!(%turn, %error, "cannot record a cancelled turn");
            }
            self.publish(
                Some(turn),
                AgentEvent::RunState {
                    state: RunState::Cancelled,
                },
            );
            if let Some(outcome) = queued.outcome {
                let _ = outcome.send(Err(Error::Cancelled));
            }
        }
        count
    }

    /// Cancels the running turn (or compaction), if any, and waits until
    /// it has ended.
    async fn end_running(&mut self) {
        let running = lock(&self.handle.current).clone();
        if let Some(running) = running {
            running.cancel.cancel();
        }
        if let Some(compacting) = self.compacting.take() {
            compacting.cancel();
        }
        if self.running.is_some() {
            wait(&mut self.running).await;
        }
        self.running = None;
        *lock(&self.handle.current) = None;
    }

    fn publish(&self, turn: Option<TurnId>, event: AgentEvent) {
        self.handle.events.publish(turn, event);
    }

    fn warn(&self, turn: Option<TurnId>, message: String) {
        self.publish(turn, AgentEvent::Warning { message });
    }
}

/// The wait after the `failures`th failed load: 1, 2, 4, 8 s.
fn retry_wait(failures: u32) -> Duration {
    LOAD_RETRY.saturating_mul(1 << failures.saturating_sub(1).min(5))
}

/// Sends a command's reply, publishing it for the session's listeners.
fn answer(
    events: &crate::events::SessionEvents,
    name: String,
    result: Result<String>,
    reply: oneshot::Sender<Result<Submitted>>,
) {
    if let Ok(text) = &result {
        events.publish(
            None,
            AgentEvent::Command {
                name: name.clone(),
                reply: text.clone(),
            },
        );
    }
    let _ = reply.send(result.map(|reply| Submitted::Command { name, reply }));
}

fn refuse(op: LaneOp, error: Error) {
    match op {
        LaneOp::Submit { accepted, .. } => {
            let _ = accepted.send(Err(error));
        }
        LaneOp::Command { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        LaneOp::Reset { done } => {
            let _ = done.send(Err(error));
        }
        LaneOp::CancelQueued { done, .. } => {
            let _ = done.send(false);
        }
        LaneOp::Recovered { done } => {
            let _ = done.send(Vec::new());
        }
        // Signals from other nodes need no answer.
        LaneOp::Cluster(_) => {}
    }
}

async fn wait(running: &mut Option<JoinHandle<()>>) {
    match running {
        Some(handle) => {
            if let Err(error) = handle.await {
                tracing::error!(%error, "a turn's task failed");
            }
        }
        None => std::future::pending().await,
    }
}

/// The start of a message's text, for reports.
pub(crate) fn preview(content: &[ContentBlock]) -> String {
    let text: String = content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= 60 {
        return text;
    }
    let mut cut: String = text.chars().take(57).collect();
    cut.push('…');
    cut
}

/// Whether a process with this id exists (it may not be Flynn: a reused
/// id keeps its turns open until that process ends, which is safe).
pub(crate) fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Some(pid) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        match rustix::process::test_kill_process(pid) {
            Ok(()) => true,
            Err(error) => error == rustix::io::Errno::PERM,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}
