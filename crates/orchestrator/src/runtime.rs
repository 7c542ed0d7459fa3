//! The session manager: many clients drive many sessions at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use flynn_context::MemoryFlush;

use crate::memory::MemoryRuntime;
use flynn_models::{ModelRouter, PriceTable};
use flynn_protocol::config::CompactionConfig;
use flynn_protocol::config::{
    Autonomy, InterruptedTurns, ModelRef, SessionsConfig, ToolPolicyConfig, VoiceReply,
};
use flynn_protocol::{
    AgentEvent, ContentBlock, Principal, RunState, SessionKey, Tier, TurnId, TurnOutcome,
};
use flynn_sessions::{Cluster, SessionStore};
use flynn_tools::{Approver, Guards, Provenance, ToolExecutor, ToolPolicy};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents::Agents;
use crate::commands::Command;
use crate::delegate::{AgentOrchestrator, DelegationSettings};
use crate::events::{EventBus, EventStream, SessionEvents};
use crate::lane::{Lane, LaneOp, RecoveredTurn};
use crate::media::MediaStore;
use crate::{Error, Result};
pub(crate) use flynn_protocol::sync::lock;

/// One message to answer.
#[derive(Clone)]
pub struct TurnRequest {
    pub session: SessionKey,
    pub content: Vec<ContentBlock>,
    /// Overrides the session's and the agent's tier.
    pub tier: Option<Tier>,
    /// Pins one model, with no fallback.
    pub model: Option<ModelRef>,
    /// Answers with this agent instead of the session's or the routed one.
    pub agent: Option<String>,
    /// Asks a person about tool calls that need confirmation; without one,
    /// such calls are denied.
    pub approver: Option<Arc<dyn Approver>>,
    /// The chat platform's id of the message: the session refuses a second
    /// message with the same id ([`Error::Duplicate`]).
    pub external_id: Option<String>,
    /// What makes this message untrusted content (a webhook's body from
    /// `webhook <name>`): the session is tainted from this turn on, as if
    /// a tool had fetched it.
    pub untrusted: Option<String>,
    /// Who sent it: a guest's turn is contained (its own session and
    /// memory, the guest tool policy, no owner-only commands). The owner
    /// unless set.
    pub principal: Principal,
    /// Set when another turn (a sub-agent's parent, a `sessions.send`)
    /// waits on this one.
    pub(crate) lineage: Lineage,
}

/// The turns a turn was started by, for depth limits and to refuse cycles.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lineage {
    /// Sessions whose running turns wait on this one, outermost first.
    pub(crate) parents: Vec<SessionKey>,
    /// Whether a sub-agent place (`agents.subagents.max_concurrent`) is
    /// held for this turn by an ancestor: its own sub-agents run in that
    /// place instead of waiting for one, which could never free while
    /// they wait.
    pub(crate) in_place: bool,
    /// A sub-agent may not do more than the agent that started it.
    pub(crate) autonomy_cap: Option<Autonomy>,
    /// The starting turn's provenance: what it read taints the turns it
    /// starts, and what they read taints it.
    pub(crate) provenance: Option<Arc<Provenance>>,
    /// The starting turn's tool policy: a sub-agent (or a turn started by
    /// `sessions.send`) runs its own policy within it, never more tools.
    pub(crate) policy_cap: Option<Arc<ToolPolicy>>,
    /// The starting turn's workspace: a sub-agent's must be inside it.
    pub(crate) workspace_cap: Option<PathBuf>,
    /// The starting turn's guards (the skills it read): a sub-agent is
    /// held to the same limits (a copy: what it reads later narrows only
    /// itself).
    pub(crate) guards: Option<Arc<Guards>>,
}

impl Lineage {
    /// How deep in delegation the turn is: 0 for a message from a person.
    pub(crate) fn depth(&self) -> u32 {
        u32::try_from(self.parents.len()).unwrap_or(u32::MAX)
    }
}

impl std::fmt::Debug for TurnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnRequest")
            .field("session", &self.session)
            .field("content", &self.content)
            .field("tier", &self.tier)
            .field("model", &self.model)
            .field("agent", &self.agent)
            .field("approver", &self.approver.is_some())
            .field("external_id", &self.external_id)
            .field("untrusted", &self.untrusted)
            .field("principal", &self.principal)
            .field("lineage", &self.lineage)
            .finish()
    }
}

impl TurnRequest {
    pub fn text(session: SessionKey, text: impl Into<String>) -> Self {
        TurnRequest {
            session,
            content: vec![ContentBlock::text(text)],
            tier: None,
            model: None,
            agent: None,
            approver: None,
            external_id: None,
            untrusted: None,
            principal: Principal::Owner,
            lineage: Lineage::default(),
        }
    }
}

/// A message its session's lane holds, in order with the session's other
/// messages; [`settled`](Self::settled) waits for what became of it.
#[derive(Debug)]
pub struct Submission {
    pending: Pending,
}

#[derive(Debug)]
enum Pending {
    Answered(Submitted),
    Turn(oneshot::Receiver<Result<TurnHandle>>),
    Command(oneshot::Receiver<Result<Submitted>>),
}

impl Submission {
    /// Whether it is a chat command (answered by the lane, or at once).
    pub fn is_command(&self) -> bool {
        !matches!(self.pending, Pending::Turn(_))
    }

    /// Waits until the lane accepted (stored) or refused the message, or
    /// answered the command.
    pub async fn settled(self) -> Result<Submitted> {
        let lost = || Error::Lost("the lane stopped".to_owned());
        match self.pending {
            Pending::Answered(submitted) => Ok(submitted),
            Pending::Turn(rx) => Ok(Submitted::Turn(rx.await.unwrap_or_else(|_| Err(lost()))?)),
            Pending::Command(rx) => rx.await.unwrap_or_else(|_| Err(lost())),
        }
    }
}

/// What submitting a message led to.
#[derive(Debug)]
pub enum Submitted {
    /// The message was accepted (stored durably) as a turn.
    Turn(TurnHandle),
    /// The message was a chat command, answered at once.
    Command { name: String, reply: String },
}

/// An accepted message whose turn runs (or waits) in its session's lane.
#[derive(Debug)]
pub struct TurnHandle {
    pub turn: TurnId,
    pub session: SessionKey,
    pub(crate) outcome: oneshot::Receiver<Result<TurnOutcome>>,
}

impl TurnHandle {
    /// Waits for the turn to end.
    pub async fn outcome(self) -> Result<TurnOutcome> {
        crate::follow::flatten(self.outcome.await)
    }
}

/// What a runtime is made of.
pub struct RuntimeParts {
    pub router: Arc<ModelRouter>,
    pub store: Arc<dyn SessionStore>,
    pub executor: ToolExecutor,
    pub agents: Agents,
    pub prices: PriceTable,
    /// Largest answer asked of a model per call.
    pub max_tokens: u32,
    pub sessions: SessionsConfig,
    /// Delegation tiers, sub-agent limits, escalation, tool summaries.
    pub delegation: DelegationSettings,
    pub compaction: CompactionConfig,
    /// Told what compaction is about to replace, before memory extraction.
    pub memory_flush: Option<Arc<dyn MemoryFlush>>,
    /// Memory files and their index: facts are extracted into them after
    /// compaction (the tools and the prompt slot are added by whoever
    /// builds the registry and the agents, see [`MemoryRuntime`]).
    pub memory: Option<MemoryRuntime>,
    /// The cluster this runtime is a node of, when its store is shared by
    /// several processes (see [`crate::cluster`]); `None` runs every
    /// session it is asked to.
    pub cluster: Option<Arc<dyn Cluster>>,
}

impl std::fmt::Debug for RuntimeParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeParts")
            .field("router", &self.router)
            .field("agents", &self.agents)
            .finish_non_exhaustive()
    }
}

/// What every lane and turn of a runtime shares.
pub(crate) struct Shared {
    pub(crate) router: Arc<ModelRouter>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) executor: ToolExecutor,
    pub(crate) agents: Agents,
    pub(crate) prices: PriceTable,
    pub(crate) max_tokens: u32,
    pub(crate) orchestrator: AgentOrchestrator,
    /// Places for sub-agents (`agents.subagents.max_concurrent`).
    pub(crate) subagents: Arc<Semaphore>,
    pub(crate) compaction: CompactionConfig,
    pub(crate) memory_flush: Option<Arc<dyn MemoryFlush>>,
    pub(crate) memory: Option<MemoryRuntime>,
    pub(crate) queue_limit: usize,
    pub(crate) lane_idle: Duration,
    pub(crate) interrupted_turns: InterruptedTurns,
    pub(crate) bus: EventBus,
    /// Guest tool policies of chat channels (`channels.<name>.guest_tools`),
    /// set by the channel router.
    pub(crate) channel_guest_tools: RwLock<HashMap<String, ToolPolicyConfig>>,
    /// Asks the owner about a guest's tool calls when the owner is not in
    /// the guest's chat (the dashboard); set by whoever serves it.
    pub(crate) owner_approver: RwLock<Option<Arc<dyn Approver>>>,
    /// When answers are also spoken in sessions that did not choose
    /// (`voice.reply`), set by whoever reads the config.
    pub(crate) voice_default: RwLock<VoiceReply>,
    /// This process; owner of the turns it runs.
    pub(crate) pid: u32,
    /// The cluster this runtime is a node of, if any.
    pub(crate) cluster: Option<Arc<dyn Cluster>>,
    /// The files turns sent, in the store.
    pub(crate) media: Arc<MediaStore>,
    /// Where lanes hand what their recovery did, once someone listens
    /// ([`SessionManager::recovered_later`]).
    pub(crate) recovery_sink: Mutex<Option<mpsc::UnboundedSender<RecoveredTurn>>>,
    pub(crate) tracker: TaskTracker,
    pub(crate) shutdown: CancellationToken,
    /// Set by [`SessionManager::drain`]: new messages are refused while
    /// the turns already accepted finish.
    draining: std::sync::atomic::AtomicBool,
    pub(crate) lanes: Mutex<HashMap<SessionKey, LaneHandle>>,
    generation: AtomicU64,
}

/// The manager's side of a lane.
#[derive(Clone)]
pub(crate) struct LaneHandle {
    pub(crate) generation: u64,
    pub(crate) tx: mpsc::Sender<LaneOp>,
    pub(crate) events: Arc<SessionEvents>,
    pub(crate) current: Arc<Mutex<Option<Running>>>,
}

/// The turn a lane is running.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    pub(crate) turn: TurnId,
    pub(crate) cancel: CancellationToken,
}

/// Operations a lane's channel holds; beyond that, senders wait.
const LANE_OPS: usize = 64;
/// The longest a sender waits for room in a lane's channel before the
/// operation is refused ([`Error::LaneBusy`]).
pub const LANE_SEND_TIMEOUT: Duration = Duration::from_secs(30);

impl Shared {
    pub(crate) fn voice_default(&self) -> VoiceReply {
        *self
            .voice_default
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The session's lane, started if it has none.
    pub(crate) fn lane(self: &Arc<Self>, key: &SessionKey) -> LaneHandle {
        self.lane_and(key, |_| ()).0
    }

    /// The session's lane, with `first` run on it before a new lane starts
    /// (so a subscription made there misses none of its events).
    pub(crate) fn lane_and<T>(
        self: &Arc<Self>,
        key: &SessionKey,
        first: impl FnOnce(&LaneHandle) -> T,
    ) -> (LaneHandle, T) {
        let mut lanes = lock(&self.lanes);
        if let Some(handle) = lanes.get(key) {
            let out = first(handle);
            return (handle.clone(), out);
        }
        let (tx, rx) = mpsc::channel(LANE_OPS);
        let handle = LaneHandle {
            generation: self.generation.fetch_add(1, Ordering::Relaxed),
            tx,
            events: self.bus.session(key.clone()),
            current: Arc::new(Mutex::new(None)),
        };
        let out = first(&handle);
        lanes.insert(key.clone(), handle.clone());
        let lane = Lane::new(self.clone(), key.clone(), handle.clone(), rx);
        self.tracker.spawn(lane.run());
        (handle, out)
    }

    /// Sends an operation to the session's lane. A lane that retired
    /// between lookup and send is replaced by a new one. A lane whose
    /// channel stays full for [`LANE_SEND_TIMEOUT`] refuses it.
    pub(crate) async fn send(self: &Arc<Self>, key: &SessionKey, op: LaneOp) -> Result<()> {
        let deadline = tokio::time::Instant::now() + LANE_SEND_TIMEOUT;
        loop {
            if self.shutdown.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            let handle = self.lane(key);
            let Ok(permit) = tokio::time::timeout_at(deadline, handle.tx.reserve()).await else {
                return Err(Error::LaneBusy {
                    session: key.clone(),
                    waited: LANE_SEND_TIMEOUT,
                });
            };
            match permit {
                Ok(permit) => {
                    permit.send(op);
                    return Ok(());
                }
                Err(mpsc::error::SendError(())) => self.forget(key, handle.generation),
            }
        }
    }

    /// Removes a lane from the map if it is still the one of `generation`.
    pub(crate) fn forget(&self, key: &SessionKey, generation: u64) {
        let mut lanes = lock(&self.lanes);
        if lanes.get(key).is_some_and(|h| h.generation == generation) {
            lanes.remove(key);
        }
    }

    /// Called by an idle lane: removes it when nothing waits for it and
    /// nobody listens to it. Returns whether it was removed.
    pub(crate) fn retire(&self, key: &SessionKey, generation: u64, queued: bool) -> bool {
        let mut lanes = lock(&self.lanes);
        let Some(handle) = lanes.get(key) else {
            return true;
        };
        if handle.generation != generation {
            return true;
        }
        if queued || handle.events.subscribers() > 0 {
            return false;
        }
        lanes.remove(key);
        true
    }
}

/// Runs turns for many sessions at once: one lane (a task that owns the
/// session's state) per active session, operations in through a bounded
/// queue, turns of one session one after another and of different
/// sessions concurrently. Idle lanes are dropped after
/// `sessions.lane_idle_secs`. Cheap to clone; every clone is the same
/// runtime.
#[derive(Clone)]
pub struct SessionManager {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("lanes", &self.active_lanes())
            .finish_non_exhaustive()
    }
}

impl SessionManager {
    /// A runtime over these parts. Lanes are tasks on the caller's tokio
    /// runtime, tracked and stopped by [`shutdown`](Self::shutdown).
    pub fn new(parts: RuntimeParts) -> Self {
        let orchestrator = AgentOrchestrator::new(
            parts.router.clone(),
            parts.store.clone(),
            parts.prices.clone(),
            parts.delegation.clone(),
        );
        let (outbox, forwarded) = match &parts.cluster {
            Some(_) => {
                let (tx, rx) = mpsc::channel(crate::cluster::OUTBOX);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let places = usize::try_from(parts.delegation.subagents.max_concurrent.max(1))
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        let media = Arc::new(MediaStore::new(parts.store.clone()));
        let shared = Shared {
            router: parts.router,
            store: parts.store,
            executor: parts.executor,
            agents: parts.agents,
            prices: parts.prices,
            max_tokens: parts.max_tokens,
            orchestrator,
            subagents: Arc::new(Semaphore::new(places)),
            compaction: parts.compaction,
            memory_flush: parts.memory_flush,
            memory: parts.memory,
            queue_limit: parts.sessions.queue_limit.max(1),
            lane_idle: Duration::from_secs(parts.sessions.lane_idle_secs.max(1)),
            interrupted_turns: parts.sessions.interrupted_turns,
            bus: EventBus::new(outbox),
            channel_guest_tools: RwLock::new(HashMap::new()),
            owner_approver: RwLock::new(None),
            voice_default: RwLock::new(VoiceReply::default()),
            pid: std::process::id(),
            cluster: parts.cluster,
            media,
            recovery_sink: Mutex::new(None),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            lanes: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        };
        let shared = Arc::new(shared);
        if let (Some(cluster), Some(forwarded)) = (&shared.cluster, forwarded) {
            shared.tracker.spawn(crate::cluster::forward(
                forwarded,
                cluster.clone(),
                shared.shutdown.clone(),
            ));
            shared
                .tracker
                .spawn(crate::cluster::dispatch(shared.clone(), cluster.clone()));
        }
        SessionManager { shared }
    }

    /// The files turns sent, kept in the store.
    pub fn media(&self) -> &Arc<MediaStore> {
        &self.shared.media
    }

    /// The cluster this runtime is a node of, if any.
    pub fn cluster(&self) -> Option<&Arc<dyn Cluster>> {
        self.shared.cluster.as_ref()
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        SessionManager { shared }
    }

    /// Runs background model work on the tiers `agents.delegation` names,
    /// costed per tier and purpose.
    pub fn orchestrator(&self) -> &AgentOrchestrator {
        &self.shared.orchestrator
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.shared.store
    }

    pub fn router(&self) -> &Arc<ModelRouter> {
        &self.shared.router
    }

    pub fn agents(&self) -> &Agents {
        &self.shared.agents
    }

    pub fn executor(&self) -> &ToolExecutor {
        &self.shared.executor
    }

    /// The tools a guest's turn may use on `channel`, over the agent's
    /// `guest_tools` (`channels.<name>.guest_tools`).
    pub fn set_channel_guest_tools(&self, channel: &str, tools: Option<ToolPolicyConfig>) {
        let mut map = self
            .shared
            .channel_guest_tools
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match tools {
            Some(tools) => map.insert(channel.to_owned(), tools),
            None => map.remove(channel),
        };
    }

    /// Who is asked about a guest's tool calls when the owner cannot be
    /// asked in a chat: the dashboard's approver, say.
    pub fn set_owner_approver(&self, approver: Arc<dyn Approver>) {
        *self
            .shared
            .owner_approver
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(approver);
    }

    /// The approver [`set_owner_approver`](Self::set_owner_approver) set.
    pub fn owner_approver(&self) -> Option<Arc<dyn Approver>> {
        self.shared
            .owner_approver
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// When answers are also spoken in sessions that did not choose with
    /// `/voice`: the config's `voice.reply` (`off` until set).
    pub fn set_voice_default(&self, reply: VoiceReply) {
        *self
            .shared
            .voice_default
            .write()
            .unwrap_or_else(PoisonError::into_inner) = reply;
    }

    /// The mode [`set_voice_default`](Self::set_voice_default) set.
    pub fn voice_default(&self) -> VoiceReply {
        self.shared.voice_default()
    }

    /// When the session's answers are also spoken: its own choice
    /// (`/voice`), else the default. Read from the store, so a choice
    /// made at another node of a cluster counts at once.
    pub async fn voice_reply(&self, session: &SessionKey) -> Result<VoiceReply> {
        let meta = self.shared.store.metadata(session).await?;
        Ok(meta.voice.unwrap_or_else(|| self.voice_default()))
    }

    /// Submits one message. A chat command is answered at once. Anything
    /// that can be refused before the turn starts (an unknown agent, no
    /// model for the tier, an empty message, a full queue) is refused
    /// here and leaves nothing in the session; otherwise the message is
    /// accepted (stored durably, with a pending mark) before this returns,
    /// and its turn runs when the turns before it in the session are done.
    pub async fn submit(&self, request: TurnRequest) -> Result<Submitted> {
        self.enqueue(request).await?.settled().await
    }

    /// Hands one message to its session's lane and returns as soon as the
    /// lane holds it, in order with the session's other messages; what
    /// became of it (accepted, refused, a command's reply) comes from the
    /// [`Submission`]. Refusals that need no lane come at once.
    pub async fn enqueue(&self, request: TurnRequest) -> Result<Submission> {
        if request.content.is_empty() {
            return Err(Error::EmptyMessage);
        }
        if let Some(command) = Command::parse(&request.content) {
            let command = command.map_err(|bad| Error::Config(bad.0))?;
            if command == Command::Cancel {
                let reply = if self.cancel_anywhere(&request.session).await {
                    "Cancelling the running turn."
                } else {
                    "Nothing is running."
                };
                let events = self.shared.lane(&request.session).events;
                events.publish(
                    None,
                    AgentEvent::Command {
                        name: command.name().to_owned(),
                        reply: reply.to_owned(),
                    },
                );
                return Ok(Submission {
                    pending: Pending::Answered(Submitted::Command {
                        name: command.name().to_owned(),
                        reply: reply.to_owned(),
                    }),
                });
            }
            let (tx, rx) = oneshot::channel();
            self.shared
                .send(
                    &request.session,
                    LaneOp::Command {
                        command,
                        principal: request.principal,
                        reply: tx,
                    },
                )
                .await?;
            return Ok(Submission {
                pending: Pending::Command(rx),
            });
        }
        if self.shared.draining.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        // Refusals that need only the config, before anything is stored.
        if let Some(name) = &request.agent {
            self.shared.agents.lookup(name, "--agent")?;
        }
        if let Some(model) = &request.model {
            self.shared.router.check_model(model)?;
        }
        if let Some(tier) = request.tier {
            self.shared.router.check_tier(tier)?;
        }
        let (tx, rx) = oneshot::channel();
        let session = request.session.clone();
        self.shared
            .send(
                &session,
                LaneOp::Submit {
                    request: Box::new(request),
                    accepted: tx,
                },
            )
            .await?;
        Ok(Submission {
            pending: Pending::Turn(rx),
        })
    }

    /// Cancels the session's running turn, if any; it ends within
    /// milliseconds (a model stream is dropped, a tool process killed),
    /// with every tool call paired with a result. Returns whether a turn
    /// was running.
    pub fn cancel(&self, session: &SessionKey) -> bool {
        self.cancel_where(session, |_| true)
    }

    /// [`cancel`](Self::cancel), and in a cluster, when the session's
    /// turn runs on another node, asks that node: returns whether a turn
    /// was running here or is running there (as the store says).
    pub async fn cancel_anywhere(&self, session: &SessionKey) -> bool {
        if self.cancel(session) {
            return true;
        }
        let Some(cluster) = &self.shared.cluster else {
            return false;
        };
        let running = match self.shared.store.open_turns(Some(session)).await {
            Ok(open) => open
                .iter()
                .any(|t| t.status == flynn_sessions::TurnStatus::Running),
            Err(error) => {
                tracing::warn!(%session, %error, "cannot tell whether another node runs a turn of the session");
                return false;
            }
        };
        running && self.ask_cluster(cluster.as_ref(), session, None).await
    }

    /// Sends a cancellation to the other nodes; whether it went out.
    async fn ask_cluster(
        &self,
        cluster: &dyn flynn_sessions::Cluster,
        session: &SessionKey,
        turn: Option<TurnId>,
    ) -> bool {
        let signal = flynn_sessions::Signal::Cancel {
            session: session.clone(),
            turn,
        };
        match cluster.signal(signal).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%session, %error, "cannot ask the other nodes to cancel the turn");
                false
            }
        }
    }

    /// Cancels one turn if it is running now; returns whether it was.
    pub(crate) fn cancel_turn_now(&self, session: &SessionKey, turn: TurnId) -> bool {
        self.cancel_where(session, |running| running == turn)
    }

    /// Empties a session through its lane, as `/reset` does: the running
    /// turn is cancelled and waited for, waiting turns are dropped (each
    /// recorded as cancelled), then the history and settings are cleared.
    /// Returns whether the session had anything stored.
    pub async fn reset(&self, session: &SessionKey) -> Result<bool> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .send(session, LaneOp::Reset { done: tx })
            .await?;
        rx.await
            .unwrap_or_else(|_| Err(Error::Lost("the lane stopped".to_owned())))
    }

    /// Cancels one turn: running, or still waiting in the queue. In a
    /// cluster, a turn open in the store but not here is another node's
    /// to cancel, and that node is asked.
    pub async fn cancel_turn(&self, session: &SessionKey, turn: TurnId) -> bool {
        if self.cancel_turn_here(session, turn).await {
            return true;
        }
        let Some(cluster) = &self.shared.cluster else {
            return false;
        };
        let open = match self.shared.store.turn(turn).await {
            Ok(Some(record)) => record.status.is_open() && &record.session == session,
            Ok(None) => false,
            Err(error) => {
                tracing::warn!(%session, %turn, %error, "cannot tell whether another node has the turn");
                return false;
            }
        };
        open && self
            .ask_cluster(cluster.as_ref(), session, Some(turn))
            .await
    }

    /// [`cancel_turn`](Self::cancel_turn) on this node only.
    pub(crate) async fn cancel_turn_here(&self, session: &SessionKey, turn: TurnId) -> bool {
        if self.cancel_where(session, |running| running == turn) {
            return true;
        }
        let (tx, rx) = oneshot::channel();
        if self
            .shared
            .send(session, LaneOp::CancelQueued { turn, done: tx })
            .await
            .is_err()
        {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    fn cancel_where(&self, session: &SessionKey, matches: impl Fn(TurnId) -> bool) -> bool {
        let handle = {
            let lanes = lock(&self.shared.lanes);
            lanes.get(session).cloned()
        };
        let Some(handle) = handle else {
            return false;
        };
        let running = lock(&handle.current).clone();
        match running {
            Some(running) if matches(running.turn) && !running.cancel.is_cancelled() => {
                running.cancel.cancel();
                handle.events.publish(
                    Some(running.turn),
                    AgentEvent::RunState {
                        state: RunState::CancelRequested,
                    },
                );
                true
            }
            _ => false,
        }
    }

    /// Events of one session, from now on.
    pub fn subscribe(&self, session: &SessionKey) -> EventStream {
        self.shared
            .lane_and(session, |handle| handle.events.subscribe())
            .1
    }

    /// Events of every session, from now on.
    pub fn subscribe_all(&self) -> EventStream {
        self.shared.bus.subscribe()
    }

    /// Finds turns a previous process left pending or running and hands
    /// each to its session's lane, which reports or reruns it
    /// (`sessions.interrupted_turns`). Lanes also do this for their own
    /// session when they start, so a session is repaired before its next
    /// turn even without this call. Returns the sessions concerned.
    pub async fn recover(&self) -> Result<Vec<SessionKey>> {
        let mut sessions: Vec<SessionKey> = Vec::new();
        for recovered in self.recover_turns().await? {
            if !sessions.contains(&recovered.session) {
                sessions.push(recovered.session);
            }
        }
        Ok(sessions)
    }

    /// [`recover`](Self::recover), returning what was done with each turn:
    /// the note of a reported one and the outcome of a rerun one, for
    /// whoever should tell the sender (the channel router tells the chat
    /// the message came from).
    ///
    /// In a cluster, only sessions no live node holds are concerned: the
    /// others' turns are their holders' to finish.
    pub async fn recover_turns(&self) -> Result<Vec<RecoveredTurn>> {
        let sessions: Vec<SessionKey> = match &self.shared.cluster {
            Some(cluster) => cluster.orphaned_sessions().await?,
            None => {
                let mut sessions: Vec<SessionKey> = Vec::new();
                for turn in self.shared.store.open_turns(None).await? {
                    if !sessions.contains(&turn.session) {
                        sessions.push(turn.session);
                    }
                }
                sessions
            }
        };
        let mut recovered = Vec::new();
        for session in &sessions {
            let (tx, rx) = oneshot::channel();
            self.shared
                .send(session, LaneOp::Recovered { done: tx })
                .await?;
            recovered.extend(rx.await.unwrap_or_default());
        }
        Ok(recovered)
    }

    /// What recovery does from now on, as it happens: a turn reported or
    /// rerun when a lane recovers its session later than start-up (in a
    /// cluster, when this node takes over the session of a node that
    /// died), for whoever tells the senders. Replaces the receiver of an
    /// earlier call.
    pub fn recovered_later(&self) -> mpsc::UnboundedReceiver<RecoveredTurn> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.shared.recovery_sink) = Some(tx);
        rx
    }

    /// Sessions with a lane right now.
    pub fn active_lanes(&self) -> usize {
        lock(&self.shared.lanes).len()
    }

    /// The turns running right now, by session.
    pub fn running(&self) -> Vec<(SessionKey, TurnId)> {
        let handles: Vec<(SessionKey, LaneHandle)> = lock(&self.shared.lanes)
            .iter()
            .map(|(key, handle)| (key.clone(), handle.clone()))
            .collect();
        let mut running: Vec<(SessionKey, TurnId)> = handles
            .into_iter()
            .filter_map(|(key, handle)| lock(&handle.current).as_ref().map(|r| (key, r.turn)))
            .collect();
        running.sort();
        running
    }

    /// Whether new messages are refused because the runtime is stopping.
    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::Acquire) || self.shared.shutdown.is_cancelled()
    }

    /// Stops gracefully: refuses new messages at once, lets the turns
    /// already accepted (running or waiting) finish for up to `grace`,
    /// then [`shutdown`](Self::shutdown)s, which cancels what is still
    /// running. Turns still waiting then stay accepted for the next start.
    /// Returns the number of turns that were cut short or left waiting.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.shared.draining.store(true, Ordering::Release);
        // A grace too long to add to now (`shutdown_grace_secs` can be any
        // u64) is as good as forever.
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(grace)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let left = loop {
            let open = match self.own_open_turns().await {
                Ok(open) => open,
                Err(error) => {
                    tracing::warn!(%error, "cannot read open turns while draining");
                    self.running().len()
                }
            };
            if open == 0 || tokio::time::Instant::now() >= deadline {
                break open;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.shutdown().await;
        left
    }

    /// The open turns this process runs or will run: alone, those it
    /// owns; in a cluster, those whose node is this one (running here, or
    /// accepted here and not yet started by the node running their
    /// session), not by pid: a process on another machine may have the
    /// same.
    async fn own_open_turns(&self) -> Result<usize> {
        let open = self.shared.store.open_turns(None).await?;
        let Some(cluster) = &self.shared.cluster else {
            return Ok(open
                .iter()
                .filter(|turn| turn.origin.owner_pid == self.shared.pid)
                .count());
        };
        let sessions: std::collections::BTreeSet<&SessionKey> =
            open.iter().map(|turn| &turn.session).collect();
        let mut own = 0;
        for session in sessions {
            own += cluster
                .turn_owners(session)
                .await?
                .values()
                .filter(|owner| **owner == flynn_sessions::TurnOwner::This)
                .count();
        }
        Ok(own)
    }

    /// Stops: refuses new messages, cancels running turns (each ends with
    /// its tool calls paired and its state stored), waits for every lane
    /// to finish, then shuts the tools down (background processes die).
    ///
    /// A node of a cluster then leaves it: the sessions it held are free
    /// for the other nodes at once.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
        if let Some(cluster) = &self.shared.cluster {
            cluster.leave().await;
        }
        // Then the tools: background processes are killed.
        self.shared.executor.registry().shutdown().await;
    }
}
