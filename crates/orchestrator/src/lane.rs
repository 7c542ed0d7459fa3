//! One session's lane: the task that owns the session's state, accepts
//! its messages in arrival order and runs its turns one after another.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use flynn_protocol::config::{InterruptedTurns, ModelRef};
use flynn_protocol::{
    AgentEvent, ContentBlock, Message, Principal, RecoveryAction, Role, RunState, SessionKey, Tier,
    TurnId, TurnOutcome,
};
use flynn_sessions::{SessionMeta, TurnOrigin, TurnRecord, TurnStatus};
use flynn_tools::{Approver, DenyAll};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::agents::AgentProfile;
use crate::commands::{Command, HELP, ModelChoice};
use crate::compact;
use crate::events::TurnEvents;
use crate::prompt::PromptContext;
use crate::runtime::{
    LaneHandle, Lineage, Running, Shared, Submitted, TurnHandle, TurnRequest, lock,
};
use crate::turn::{self, TurnJob};
use crate::{Error, Result};

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
    /// Drop a turn that is still waiting.
    CancelQueued {
        turn: TurnId,
        done: oneshot::Sender<bool>,
    },
    /// Answered once the lane has recovered its session's open turns.
    Recovered { done: oneshot::Sender<()> },
}

/// A turn waiting for its lane.
struct Queued {
    record: TurnRecord,
    tier: Option<Tier>,
    model: Option<ModelRef>,
    approver: Option<Arc<dyn Approver>>,
    lineage: Lineage,
    /// Where the outcome goes; `None` for a turn rerun after a restart.
    outcome: Option<oneshot::Sender<Result<TurnOutcome>>>,
}

pub(crate) struct Lane {
    shared: Arc<Shared>,
    key: SessionKey,
    handle: LaneHandle,
    rx: mpsc::Receiver<LaneOp>,
    queue: VecDeque<Queued>,
    running: Option<JoinHandle<()>>,
    meta: SessionMeta,
    /// What tainted the session (`SessionMeta::taint`), shared with its
    /// running turn, which records new taint here and in the store.
    taint: Arc<Mutex<Option<String>>>,
}

impl Lane {
    pub(crate) fn new(
        shared: Arc<Shared>,
        key: SessionKey,
        handle: LaneHandle,
        rx: mpsc::Receiver<LaneOp>,
    ) -> Self {
        Lane {
            shared,
            key,
            handle,
            rx,
            queue: VecDeque::new(),
            running: None,
            meta: SessionMeta::default(),
            taint: Arc::default(),
        }
    }

    pub(crate) async fn run(mut self) {
        if let Err(error) = self.load().await {
            tracing::error!(session = %self.key, %error, "cannot load the session");
            self.warn(None, format!("cannot load session {}: {error}", self.key));
        }
        loop {
            if self.running.is_none() {
                self.start_next().await;
            }
            let idle = self.running.is_none() && self.queue.is_empty();
            tokio::select! {
                biased;
                () = self.shared.shutdown.cancelled() => {
                    self.stop().await;
                    self.shared.forget(&self.key, self.handle.generation);
                    break;
                }
                () = wait(&mut self.running) => {
                    self.running = None;
                    *lock(&self.handle.current) = None;
                }
                op = self.rx.recv() => match op {
                    Some(op) => self.handle(op).await,
                    None => break,
                },
                () = tokio::time::sleep(self.shared.lane_idle), if idle => {
                    if self.shared.retire(&self.key, self.handle.generation, !self.rx.is_empty()) {
                        self.rx.close();
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

    async fn load(&mut self) -> Result<()> {
        self.meta = self.shared.store.metadata(&self.key).await?;
        *lock(&self.taint) = self.meta.taint.clone();
        self.recover().await
    }

    /// Reports or reruns the turns a previous process left open.
    async fn recover(&mut self) -> Result<()> {
        let store = self.shared.store.clone();
        for record in store.open_turns(Some(&self.key)).await? {
            let owner = record.origin.owner_pid;
            if owner != self.shared.pid && process_alive(owner) {
                // Another live process is running it.
                continue;
            }
            let was_running = record.status == TurnStatus::Running;
            if was_running {
                self.close_cut_off_calls(record.id).await?;
            }
            let preview = preview(&record.content);
            match self.shared.interrupted_turns {
                InterruptedTurns::Report => {
                    // A pending turn's message joins the history here.
                    store.start_turn(record.id, self.shared.pid).await?;
                    let note = format!(
                        "⚠ Interrupted: Flynn stopped before it finished answering \"{preview}\". Nothing more was done; send the message again if you still want it."
                    );
                    store
                        .append_for_turn(&self.key, record.id, &[Message::assistant(note)])
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
                    self.queue.push_back(Queued {
                        record,
                        tier: None,
                        model: None,
                        approver: None,
                        lineage: Lineage::default(),
                        outcome: None,
                    });
                }
            }
        }
        Ok(())
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
                command,
                principal,
                reply,
            } => {
                let name = command.name().to_owned();
                let result = self.command(command, &principal).await;
                if let Ok(text) = &result {
                    self.publish(
                        None,
                        AgentEvent::Command {
                            name: name.clone(),
                            reply: text.clone(),
                        },
                    );
                }
                let _ = reply.send(result.map(|reply| Submitted::Command { name, reply }));
            }
            LaneOp::CancelQueued { turn, done } => {
                let found = self.cancel_queued(|id| id == turn).await;
                let _ = done.send(found > 0);
            }
            LaneOp::Recovered { done } => {
                let _ = done.send(());
            }
        }
    }

    /// Stores the message as a pending turn and queues it.
    async fn accept(&mut self, request: TurnRequest) -> Result<TurnHandle> {
        if self.queue.len() >= self.shared.queue_limit {
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
        let record = self
            .shared
            .store
            .accept(&self.key, &request.content, &origin)
            .await?;
        // `accept` recorded the channel in the store too.
        self.meta.last_channel = Some(self.key.channel().to_owned());
        if let Some(source) = &request.untrusted {
            // A webhook's body: untrusted content from the first word.
            let taint = format!("{source} in turn {}", record.id);
            self.shared.store.set_taint(&self.key, Some(&taint)).await?;
            *lock(&self.taint) = Some(taint);
        }
        let (tx, rx) = oneshot::channel();
        let turn = record.id;
        self.queue.push_back(Queued {
            record,
            tier: request.tier,
            model: request.model,
            approver: request.approver,
            lineage: request.lineage,
            outcome: Some(tx),
        });
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
        let Some(queued) = self.queue.pop_front() else {
            return;
        };
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
            content: queued.record.content.clone(),
            agent,
            tier,
            model,
            approver,
            principal: queued.record.origin.principal.clone(),
            lineage: queued.lineage.clone(),
            taint: self.taint.clone(),
            events: TurnEvents {
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

    async fn command(&mut self, command: Command, principal: &Principal) -> Result<String> {
        let store = self.shared.store.clone();
        if let Principal::Guest { channel, id } = principal {
            if let Some(refusal) = self.guest_refusal(&command, channel, id) {
                return Ok(refusal);
            }
            if let Command::Agent(None) = command {
                let current = self.session_agent().name.clone();
                let mut out = String::from("Agents you can talk to here:");
                for name in self.shared.agents.reachable_by(channel, id, &self.key) {
                    let mark = if name == current {
                        " (this session)"
                    } else {
                        ""
                    };
                    let _ = write!(out, "\n- {name}{mark}");
                }
                return Ok(out);
            }
        }
        match command {
            Command::Help => Ok(HELP.to_owned()),
            Command::Status => self.status().await,
            Command::Reset => {
                self.end_running().await;
                self.cancel_queued(|_| true).await;
                store.clear(&self.key).await?;
                self.meta = SessionMeta::default();
                *lock(&self.taint) = None;
                Ok("Conversation reset: this session starts afresh.".to_owned())
            }
            Command::Trust => {
                let Some(source) = lock(&self.taint).take() else {
                    return Ok("Nothing in this session is marked untrusted.".to_owned());
                };
                store.set_taint(&self.key, None).await?;
                Ok(format!(
                    "The untrusted content in this session ({source}) is now trusted: tools no longer ask because of it. Send /trust again after the agent reads anything else from outside."
                ))
            }
            // `SessionManager::submit` answers /cancel without the queue.
            Command::Cancel => Ok("Nothing is running.".to_owned()),
            Command::Compact => self.compact_now(principal.is_owner()).await,
            Command::Model(None) => Ok(self.describe_model()),
            Command::Model(Some(ModelChoice::Tier(tier))) => {
                self.shared.router.check_tier(tier)?;
                self.meta.tier = Some(tier);
                self.meta.model = None;
                store.set_metadata(&self.key, &self.meta).await?;
                Ok(format!("This session now uses {}.", self.describe_choice()))
            }
            Command::Model(Some(ModelChoice::Model(model))) => {
                self.shared.router.check_model(&model)?;
                self.meta.model = Some(model);
                store.set_metadata(&self.key, &self.meta).await?;
                Ok(format!("This session now uses {}.", self.describe_choice()))
            }
            Command::Agent(None) => {
                let current = self.session_agent().name.clone();
                let mut out = String::from("Agents:");
                for name in self.shared.agents.names() {
                    let mark = if name == current {
                        " (this session)"
                    } else {
                        ""
                    };
                    let _ = write!(out, "\n- {name}{mark}");
                }
                Ok(out)
            }
            Command::Agent(Some(name)) => {
                let name = self.shared.agents.lookup(&name, "/agent")?.name.clone();
                self.meta.agent = Some(name.clone());
                store.set_metadata(&self.key, &self.meta).await?;
                Ok(format!("This session now talks to the agent '{name}'."))
            }
        }
    }

    /// Why a guest may not run `command`, if it may not: `/trust` is the
    /// owner's; `/agent` reaches only the agents routed to the guest;
    /// `/model` only what the agent lists in `models`.
    fn guest_refusal(&self, command: &Command, channel: &str, sender: &str) -> Option<String> {
        match command {
            Command::Trust => {
                Some("Only the owner can vouch for untrusted content with /trust.".to_owned())
            }
            Command::Agent(Some(name)) => {
                let reachable = self.shared.agents.reachable_by(channel, sender, &self.key);
                (!reachable.contains(&name.as_str())).then(|| {
                    format!(
                        "You can't switch to the agent '{name}' here. Agents you can talk to: {}.",
                        reachable.join(", ")
                    )
                })
            }
            Command::Model(Some(choice)) => {
                let agent = self.session_agent();
                let wanted = match choice {
                    ModelChoice::Tier(tier) => tier.as_str().to_owned(),
                    ModelChoice::Model(model) => model.to_string(),
                };
                if agent.models.iter().any(|allowed| allowed == &wanted) {
                    return None;
                }
                Some(if agent.models.is_empty() {
                    format!(
                        "The model can't be changed here (the agent '{}' lists no models for guests in agents.list[].models).",
                        agent.name
                    )
                } else {
                    format!(
                        "'{wanted}' is not a model you can pick here. You can pick: {}.",
                        agent.models.join(", ")
                    )
                })
            }
            _ => None,
        }
    }

    /// `/compact`: summarises everything older than the kept turns now.
    async fn compact_now(&mut self, extract: bool) -> Result<String> {
        if self.running.is_some() {
            return Ok(
                "A turn is running; send /compact again when it has finished. Nothing was changed."
                    .to_owned(),
            );
        }
        if !self.shared.compaction.enabled {
            return Ok(
                "Compaction is off (compaction.enabled: false). Nothing was changed.".to_owned(),
            );
        }
        let agent = self.session_agent().clone();
        let (tier, model) = self.model_choice(&agent, None, None);
        let model = match model {
            Some(model) => model,
            None => match self.shared.router.chain(tier).first() {
                Some(model) => model.clone(),
                None => {
                    self.shared.router.check_tier(tier)?;
                    return Ok("No model to compact for. Nothing was changed.".to_owned());
                }
            },
        };
        let system = agent
            .prompt
            .build(&PromptContext {
                session: &self.key,
                agent: &agent.name,
                workspace: agent.workspace(),
                message: &[],
                principal: &Principal::Owner,
            })
            .await;
        let tools = self
            .shared
            .executor
            .registry()
            .specs_for(agent.policy_for(Some(model.provider())));
        let counter =
            flynn_models::token_counter(self.shared.router.token_counting(), model.model());
        let overhead = counter.count_request(Some(&system), &[], &tools);
        match compact::force(&self.shared, &self.key, &model, overhead, extract).await? {
            Some(report) => {
                self.publish(None, compact::event(&report));
                Ok(compact::describe(&report))
            }
            None => Ok(format!(
                "Nothing to compact: the conversation has no more than the last {} turns, which are always kept.",
                self.shared.compaction.keep_turns
            )),
        }
    }

    fn describe_choice(&self) -> String {
        let agent = self.session_agent();
        let (tier, model) = self.model_choice(agent, None, None);
        match model {
            Some(model) => format!("the model {model} (no fallback)"),
            None => {
                let chain = self.shared.router.chain(tier);
                match chain.first() {
                    Some(first) => format!("the {tier} tier ({first} first)"),
                    None => format!("the {tier} tier (no model is configured for it)"),
                }
            }
        }
    }

    fn describe_model(&self) -> String {
        format!(
            "This session uses {}. Change it with /model <fast|default|complex|local> or /model <provider/model>.",
            self.describe_choice()
        )
    }

    async fn status(&self) -> Result<String> {
        let store = &self.shared.store;
        let agent = self.session_agent();
        let (tier, model) = self.model_choice(agent, None, None);
        let model = model.or_else(|| self.shared.router.chain(tier).first().cloned());
        let mut out = format!("Session: {}\nAgent: {}\n", self.key, agent.name);
        let _ = writeln!(out, "Model: {}", self.describe_choice());
        let history: Vec<Message> = store
            .history(&self.key)
            .await?
            .into_iter()
            .map(|stored| stored.message)
            .collect();
        if let Some(model) = &model {
            let counter =
                flynn_models::token_counter(self.shared.router.token_counting(), model.model());
            let used = counter.count_request(None, &history, &[]);
            let window = self
                .shared
                .router
                .windows()
                .offline(model.provider(), model.model())
                .tokens;
            let percent = used.saturating_mul(100) / usize::try_from(window).unwrap_or(1).max(1);
            let _ = writeln!(
                out,
                "Context: about {used} of {window} tokens ({percent}%), {} messages",
                history.len()
            );
        }
        let totals = store.usage_by_tier(Some(&self.key)).await?;
        let (mut calls, mut input, mut output, mut cost, mut unpriced) = (0, 0, 0, 0.0, 0);
        for (_, total) in &totals {
            calls += total.calls;
            input += total.usage.input_tokens;
            output += total.usage.output_tokens;
            cost += total.cost_usd;
            unpriced += total.unpriced_calls;
        }
        let _ = write!(
            out,
            "This session: {calls} model calls, {input} tokens in, {output} out, ${cost:.4}"
        );
        if unpriced > 0 {
            let _ = write!(out, " ({unpriced} calls with no known price)");
        }
        let running = lock(&self.handle.current).clone();
        match running {
            Some(running) => {
                let _ = write!(
                    out,
                    "\nRunning: turn {} ({} waiting)",
                    running.turn,
                    self.queue.len()
                );
            }
            None if !self.queue.is_empty() => {
                let _ = write!(out, "\nWaiting: {} messages", self.queue.len());
            }
            None => {}
        }
        Ok(out)
    }

    /// Cancels the running turn, if any, and waits until it has ended.
    async fn end_running(&mut self) {
        let running = lock(&self.handle.current).clone();
        if let Some(running) = running {
            running.cancel.cancel();
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

fn refuse(op: LaneOp, error: Error) {
    match op {
        LaneOp::Submit { accepted, .. } => {
            let _ = accepted.send(Err(error));
        }
        LaneOp::Command { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        LaneOp::CancelQueued { done, .. } => {
            let _ = done.send(false);
        }
        LaneOp::Recovered { done } => {
            let _ = done.send(());
        }
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
fn preview(content: &[ContentBlock]) -> String {
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
fn process_alive(pid: u32) -> bool {
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
