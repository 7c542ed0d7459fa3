//! One turn: model → tools → model until a text answer.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flynn_context::{Budget, CompactionError};
use flynn_models::{ModelRequest, ModelResponse, RoutedStream, StreamEvent};
use flynn_protocol::config::ModelRef;
use flynn_protocol::{
    AgentEvent, ContentBlock, Message, Principal, Purpose, Resolution, Role, RunState, SessionKey,
    Tier, ToolCall, ToolCallSummary, ToolResult, ToolSpec, TurnId, TurnOutcome, TurnTiming, Usage,
};
use flynn_sessions::{TurnStatus, UsageRecord};
use flynn_tools::builtin::TOOL_OUTPUT;
use flynn_tools::{
    ApprovalRequest, Approver, GateObserver, Provenance, ToolCatalog, ToolContext, ToolPolicy,
};
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::agents::AgentProfile;
use crate::delegate::SubAgentRequest;
use crate::events::TurnPublisher;
use crate::host::TurnHost;
use crate::prompt::PromptContext;
use crate::runtime::Shared;
use crate::runtime::{Lineage, lock};
use crate::{Error, Result};
use flynn_protocol::clock::now_millis;

/// Everything one turn needs, resolved when it starts.
pub(crate) struct TurnJob {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SessionKey,
    pub(crate) turn: TurnId,
    /// The turn was started when its message was accepted (see
    /// `Turns::accept_and_start`); otherwise the turn starts it.
    pub(crate) started: bool,
    /// The message being answered (for the prompt's slots).
    pub(crate) content: Vec<ContentBlock>,
    pub(crate) agent: Arc<AgentProfile>,
    pub(crate) tier: Tier,
    pub(crate) model: Option<ModelRef>,
    pub(crate) approver: Arc<dyn Approver>,
    /// Who sent the message: a guest's turn gets the guest policy, its
    /// own session and memory.
    pub(crate) principal: Principal,
    pub(crate) lineage: Lineage,
    /// What tainted the session before this turn; the turn records here
    /// what taints it now.
    pub(crate) taint: Arc<Mutex<Option<String>>>,
    pub(crate) events: TurnPublisher,
    pub(crate) cancel: CancellationToken,
}

/// What one model call produced.
struct Step {
    response: ModelResponse,
    model: ModelRef,
}

/// Runs the turn to its end, records how it ended, and publishes its
/// events; the last event is `run_state` complete, cancelled or error.
pub(crate) async fn run(job: TurnJob) -> Result<TurnOutcome> {
    job.events.publish(AgentEvent::RunState {
        state: RunState::Start,
    });
    // A sub-agent's turn shares its parent's provenance: each taints the
    // other.
    let provenance = match &job.lineage.provenance {
        Some(parent) => parent.clone(),
        None => Arc::new(Provenance::for_turn(
            owner_text(&job.content),
            lock(&job.taint).clone(),
        )),
    };
    // A panic (a bug) in the turn ends this turn as failed, with a
    // message its session and client hear; the lane, the session and the
    // daemon carry on.
    let result = std::panic::AssertUnwindSafe(body(&job, &provenance))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            let message = flynn_protocol::fault::panic_message(panic.as_ref());
            tracing::error!(session = %job.session, turn = %job.turn, panic = message, "the turn panicked; it failed and the session carries on");
            Err(Error::Lost(format!(
                "a bug in Flynn stopped it ({message}); the session still works, send the message again"
            )))
        });
    let recorded = matches!(result, Ok(Ended { recorded: true, .. }));
    let result = result.map(|ended| ended.outcome);
    record_taint(&job, &provenance).await;
    let status = match &result {
        Ok(_) => TurnStatus::Completed,
        Err(Error::Cancelled) => TurnStatus::Cancelled,
        Err(_) => TurnStatus::Failed,
    };
    // The turn's state is durable before anyone hears how it ended.
    if !recorded && let Err(error) = job.shared.store.finish_turn(job.turn, status).await {
        tracing::error!(turn = %job.turn, %error, "cannot record how the turn ended; trying again until it is");
        record_end_later(job.shared.store.clone(), job.turn, status);
    }
    match &result {
        Ok(outcome) => {
            job.events.publish(AgentEvent::Done {
                outcome: outcome.clone(),
            });
            job.events.publish(AgentEvent::RunState {
                state: RunState::Complete,
            });
        }
        Err(Error::Cancelled) => job.events.publish(AgentEvent::RunState {
            state: RunState::Cancelled,
        }),
        Err(error) => {
            job.events.publish(AgentEvent::Error {
                code: error.code(),
                message: error.to_string(),
            });
            job.events.publish(AgentEvent::RunState {
                state: RunState::Error,
            });
        }
    }
    result
}

/// Records how `turn` ended once the store takes it (a full disk, a
/// read-only database): until then it would stay open, and a shutdown
/// would wait for it and the next start report it interrupted. Tries
/// after 1 s, doubling up to 30 s, for as long as the process runs.
fn record_end_later(store: Arc<dyn flynn_sessions::Turns>, turn: TurnId, status: TurnStatus) {
    tokio::spawn(async move {
        let mut wait = Duration::from_secs(1);
        loop {
            tokio::time::sleep(wait).await;
            match store.finish_turn(turn, status).await {
                Ok(()) => {
                    tracing::info!(%turn, "recorded how the turn ended after all");
                    return;
                }
                Err(
                    flynn_sessions::Error::UnknownTurn { .. }
                    | flynn_sessions::Error::TurnFinished { .. },
                ) => return,
                Err(_) => wait = (wait * 2).min(Duration::from_secs(30)),
            }
        }
    });
}

/// What the sender of the message a turn answers wrote: its text without
/// the untrusted content it carries (a webhook's body).
fn owner_text(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(flynn_protocol::strip_untrusted(text)),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Keeps the session tainted once untrusted content entered it in this
/// turn (or in a turn it started), until the owner clears it.
async fn record_taint(job: &TurnJob, provenance: &Provenance) {
    let Some(source) = provenance.untrusted_source() else {
        return;
    };
    let taint = {
        let mut known = lock(&job.taint);
        if known.is_some() {
            return;
        }
        let taint = format!("{source} in turn {}", job.turn);
        *known = Some(taint.clone());
        taint
    };
    if let Err(error) = job.shared.store.set_taint(&job.session, Some(&taint)).await {
        tracing::error!(session = %job.session, %error, "cannot record that the session holds untrusted content");
    }
}

/// A turn's body that ended well.
struct Ended {
    outcome: TurnOutcome,
    /// The turn was recorded as completed with its last answer (see
    /// `Turns::append_last_answer`): `run` has no end left to store.
    recorded: bool,
}

async fn body(job: &TurnJob, provenance: &Arc<Provenance>) -> Result<Ended> {
    let shared = &job.shared;
    if !job.started {
        shared.store.start_turn(job.turn, shared.pid).await?;
    }
    flynn_protocol::fault::point("turn");
    let mut history = load_history(job).await?;
    let system = system_prompt(job).await;
    let policy = turn_policy(job)?;
    // Servers this agent may use that start on demand (or are still
    // starting) get their chance to list their tools first.
    tokio::select! {
        () = shared.executor.registry().prepare(&policy) => {}
        () = job.cancel.cancelled() => {}
    }
    let catalog = Arc::new(shared.executor.catalog(policy.clone()));
    let ctx = tool_context(job, policy, &catalog, provenance);
    let iterations = job.agent.max_iterations.max(1);
    let mut route = Route {
        tier: job.tier,
        model: job.model.clone(),
        purpose: Purpose::Conversation,
    };
    let mut escalated = false;
    let mut tally = Tally::default();

    loop {
        for _ in 0..iterations {
            // Tools found with `tools.search` join the offer; a skill in
            // use narrows it to what it declares (the executor refuses the
            // rest anyway).
            let mut tools = catalog.offered();
            tools.retain(|tool| ctx.guards.offers(&tool.name));
            let step = call_model_compacting(
                job,
                &route,
                &system,
                &tools,
                &mut history,
                &mut tally.timing,
            )
            .await?;
            // An answer that calls no tool ends the turn: it is stored
            // with the turn's end, one commit for both. The session's
            // taint goes first, so no crash leaves a completed turn whose
            // untrusted content the session does not know of.
            let last = step.response.message.tool_uses().next().is_none();
            if last {
                record_taint(job, provenance).await;
            }
            let message = tally.keep_answer(job, &route, step, last).await?;
            let text = message.text();
            if !text.is_empty() {
                tally.texts.push(text.clone());
            }
            let calls: Vec<ToolCall> = message
                .tool_uses()
                .map(|(id, name, input)| ToolCall {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    arguments: input.clone(),
                })
                .collect();
            history.push(message);

            if last {
                let offer = escalation_offer(job, &route, &text);
                if let Some(offer) = &offer {
                    job.events.publish(AgentEvent::Warning {
                        message: offer.clone(),
                    });
                }
                return Ok(Ended {
                    outcome: tally.outcome(text, offer),
                    recorded: true,
                });
            }
            let running = Instant::now();
            let results = run_tools(job, &calls, &ctx, &mut tally.tool_calls).await;
            tally.timing.tools_us += micros(running);
            let results = Message {
                role: Role::User,
                content: results,
            };
            shared
                .store
                .append_for_turn(&job.session, job.turn, std::slice::from_ref(&results))
                .await?;
            history.push(results);
            if job.cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
        }
        if escalated {
            break;
        }
        match escalation(job, &route, iterations) {
            Some(next) => {
                escalated = true;
                route = next;
            }
            None => break,
        }
    }

    let total = if escalated {
        iterations.saturating_mul(2)
    } else {
        iterations
    };
    let warning = format!(
        "stopped after {total} model calls (agents.max_iterations) while the model was still using tools; the answer may be incomplete"
    );
    job.events.publish(AgentEvent::Warning {
        message: warning.clone(),
    });
    let reply = tally.texts.join("\n\n");
    Ok(Ended {
        outcome: tally.outcome(reply, Some(warning)),
        recorded: false,
    })
}

/// The agent's system prompt for this turn.
async fn system_prompt(job: &TurnJob) -> String {
    let agent = &job.agent;
    agent
        .prompt
        .build(&PromptContext {
            session: &job.session,
            agent: &agent.name,
            workspace: agent.workspace(),
            message: &job.content,
            principal: &job.principal,
        })
        .await
}

/// The tool policy of this turn: the agent's for the provider of the
/// turn's model (its first choice; a fallback keeps the same offer), the
/// guest policy for a guest, and never more than the turn that started a
/// sub-agent had.
fn turn_policy(job: &TurnJob) -> Result<Arc<ToolPolicy>> {
    let shared = &job.shared;
    let agent = &job.agent;
    let provider = match &job.model {
        Some(model) => Some(model.provider().to_owned()),
        None => shared
            .router
            .chain(job.tier)
            .first()
            .map(|model| model.provider().to_owned()),
    };
    let mut policy = agent.policy_for(provider.as_deref()).clone();
    if job.principal.is_guest() {
        let channel_tools = shared
            .channel_guest_tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(job.session.channel())
            .cloned();
        policy = Arc::new(agent.guest_policy(provider.as_deref(), channel_tools.as_ref()));
    }
    if let Some(cap) = job.lineage.autonomy_cap {
        // A sub-agent never does more than the agent that started it.
        policy = Arc::new(policy.capped(cap));
    }
    if let Some(outer) = &job.lineage.policy_cap {
        // Nor uses a tool the starting turn could not.
        policy = Arc::new(policy.within(outer));
    }
    if let Some(outer) = &job.lineage.workspace_cap
        && !agent.workspace().starts_with(outer)
    {
        return Err(Error::Config(format!(
            "the agent '{}' works in {}, outside the workspace of the turn that started it ({}); a sub-agent never gets more workspace than its parent",
            agent.name,
            agent.workspace().display(),
            outer.display()
        )));
    }
    Ok(policy)
}

/// What the turn's tool calls run with.
fn tool_context(
    job: &TurnJob,
    policy: Arc<ToolPolicy>,
    catalog: &Arc<ToolCatalog>,
    provenance: &Arc<Provenance>,
) -> ToolContext {
    let shared = &job.shared;
    let agent = &job.agent;
    ToolContext {
        workspace: agent.workspace().to_path_buf(),
        hidden: shared.executor.hidden(),
        cancel: job.cancel.child_token(),
        session: job.session.clone(),
        principal: job.principal.clone(),
        agent: agent.name.clone(),
        turn: Some(job.turn),
        policy,
        approver: job.approver.clone(),
        observer: Some(Arc::new(GateEvents(job.events.clone()))),
        provenance: provenance.clone(),
        catalog: Some(catalog.clone()),
        host: Some(Arc::new(TurnHost {
            shared: shared.clone(),
            session: job.session.clone(),
            agent: agent.clone(),
            tier: job.tier,
            lineage: job.lineage.clone(),
            approver: job.approver.clone(),
            principal: job.principal.clone(),
        })),
        guards: job.lineage.guards.clone().unwrap_or_default(),
        media: Some(Arc::new(crate::media::TurnMedia {
            store: shared.media.clone(),
            session: job.session.clone(),
            events: job.events.clone(),
        })),
        attachments: flynn_tools::Attachments::default(),
    }
}

/// Compacts the history when it needs it, then calls the model. When the
/// window was smaller than thought (or the estimate low) the call fails
/// with a context overflow: the history is compacted then and the call
/// made once more.
async fn call_model_compacting(
    job: &TurnJob,
    route: &Route,
    system: &str,
    tools: &[ToolSpec],
    history: &mut Vec<Message>,
    timing: &mut TurnTiming,
) -> Result<Step> {
    let compacting = Instant::now();
    compact_if_needed(job, route, system, tools, history, false).await?;
    timing.compaction_us += micros(compacting);
    let calling = Instant::now();
    match call_model(job, route, system, history, tools).await {
        Err(Error::Model(error)) if error.is_context_overflow() => {
            tracing::info!(session = %job.session, %error, "context overflow; compacting and retrying");
            timing.model_calls_us.push(micros(calling));
            let compacting = Instant::now();
            let compacted = compact_if_needed(job, route, system, tools, history, true).await?;
            timing.compaction_us += micros(compacting);
            if !compacted {
                return Err(Error::Model(error));
            }
            let calling = Instant::now();
            let step = call_model(job, route, system, history, tools).await?;
            timing.model_calls_us.push(micros(calling));
            Ok(step)
        }
        other => {
            let step = other?;
            timing.model_calls_us.push(micros(calling));
            Ok(step)
        }
    }
}

/// What an answer says when the model is unsure of it.
const UNSURE: [&str; 10] = [
    "i'm not sure",
    "i am not sure",
    "i'm not certain",
    "i am not certain",
    "i can't be sure",
    "i cannot be sure",
    "i'm not confident",
    "i am not confident",
    "beyond what i can",
    "beyond my ability",
];

/// The offer of the complex tier, when the model says it is unsure and
/// `agents.auto_escalate` is on (the turn ran on a cheaper tier that was
/// not pinned, and the complex tier is usable): said after the answer.
fn escalation_offer(job: &TurnJob, route: &Route, answer: &str) -> Option<String> {
    let shared = &job.shared;
    let complex = shared.orchestrator.tier_for(Purpose::ComplexReasoning);
    if !shared.orchestrator.settings().auto_escalate
        || route.model.is_some()
        || route.tier == complex
        || shared.router.check_tier(complex).is_err()
    {
        return None;
    }
    let answer = answer.to_lowercase().replace('’', "'");
    UNSURE.iter().any(|marker| answer.contains(marker)).then(|| {
        format!(
            "the model ({} tier) says it is unsure; send `/model {complex}` and ask again for the {complex} tier (agents.auto_escalate)",
            route.tier
        )
    })
}

/// Where a turn that used up its model calls goes on: once on the complex
/// tier, when that is allowed, another tier and usable (and the turn was
/// not pinned to a model). Tells the turn's followers.
fn escalation(job: &TurnJob, route: &Route, iterations: u32) -> Option<Route> {
    let shared = &job.shared;
    let complex = shared.orchestrator.tier_for(Purpose::ComplexReasoning);
    let settings = shared.orchestrator.settings();
    if !settings.auto_escalate
        || route.model.is_some()
        || route.tier == complex
        || shared.router.check_tier(complex).is_err()
    {
        return None;
    }
    job.events.publish(AgentEvent::Warning {
        message: format!(
            "reached {iterations} model calls (agents.max_iterations) on the {} tier; continuing once on the {complex} tier (agents.auto_escalate)",
            route.tier
        ),
    });
    Some(Route {
        tier: complex,
        model: None,
        purpose: Purpose::ComplexReasoning,
    })
}

/// What a turn has done so far: what its model calls cost, the tools it
/// called, what it said, the model that answered last, and where its time
/// went.
#[derive(Default)]
struct Tally {
    usage: Usage,
    cost: Option<f64>,
    tool_calls: Vec<ToolCallSummary>,
    texts: Vec<String>,
    last_model: Option<ModelRef>,
    timing: TurnTiming,
}

impl Tally {
    /// Stores a model's answer with what it cost, counts it, and hands the
    /// message back. The answer and its cost are stored together: a
    /// paid-for answer is never lost, nor counted without being kept. The
    /// `last` answer of a turn also records the turn as completed.
    async fn keep_answer(
        &mut self,
        job: &TurnJob,
        route: &Route,
        step: Step,
        last: bool,
    ) -> Result<Message> {
        let shared = &job.shared;
        let usage = step.response.usage;
        self.usage.add(usage);
        let call_cost = shared
            .prices
            .cost(step.model.provider(), step.model.model(), &usage);
        if let Some(call_cost) = call_cost {
            *self.cost.get_or_insert(0.0) += call_cost;
        }
        let message = step.response.message;
        let record = UsageRecord {
            session: job.session.clone(),
            provider: step.model.provider().to_owned(),
            model: step.model.model().to_owned(),
            tier: route.tier,
            purpose: route.purpose,
            usage,
            cost_usd: call_cost,
            partial: false,
        };
        if last {
            shared
                .store
                .append_last_answer(&job.session, job.turn, &message, &record)
                .await?;
        } else {
            shared
                .store
                .append_answer(&job.session, Some(job.turn), &message, &record)
                .await?;
        }
        self.last_model = Some(step.model);
        Ok(message)
    }

    fn outcome(self, reply: String, warning: Option<String>) -> TurnOutcome {
        let (provider, model) = self.last_model.map_or((String::new(), String::new()), |m| {
            (m.provider().to_owned(), m.model().to_owned())
        });
        TurnOutcome {
            reply,
            provider,
            model,
            usage: self.usage,
            cost_usd: self.cost,
            tool_calls: self.tool_calls,
            warning,
            timing: Some(self.timing),
        }
    }
}

/// Microseconds since `since`.
fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Which models a model call goes to, and what it is counted as.
struct Route {
    tier: Tier,
    model: Option<ModelRef>,
    purpose: Purpose,
}

/// The session's stored history, made ready to send.
async fn load_history(job: &TurnJob) -> Result<Vec<Message>> {
    let stored = job.shared.store.history(&job.session).await?;
    Ok(flynn_context::prepare(
        stored.into_iter().map(|stored| stored.message).collect(),
    ))
}

/// Whether a guest wrote any message kept in the session.
async fn guests_wrote(job: &TurnJob) -> Result<bool> {
    let stored = job.shared.store.history(&job.session).await?;
    Ok(stored
        .iter()
        .any(|message| message.principal.as_ref().is_some_and(Principal::is_guest)))
}

/// Compacts the session when the next request would reach
/// `compaction.threshold_pct` of the model's window (or, with `force`,
/// whenever there is anything to compact), and reloads `history`.
/// Returns whether anything was compacted.
async fn compact_if_needed(
    job: &TurnJob,
    route: &Route,
    system: &str,
    tools: &[ToolSpec],
    history: &mut Vec<Message>,
    force: bool,
) -> Result<bool> {
    let shared = &job.shared;
    if !shared.compaction.enabled {
        return Ok(false);
    }
    let model = match &route.model {
        Some(model) => Some(model.clone()),
        None => shared.router.chain(route.tier).first().cloned(),
    };
    let Some(model) = model else {
        return Ok(false);
    };
    let compactor = |extract| {
        crate::compact::compactor(
            shared,
            &job.session,
            job.lineage.depth(),
            &model,
            &job.cancel,
            extract,
        )
    };
    let counter = flynn_models::token_counter(shared.router.token_counting(), model.model());
    let overhead = counter.count_request(Some(system), &[], tools);
    let tokens = overhead + counter.count_request(None, history, &[]);
    let window = crate::compact::window_of(shared, &model).await;
    if !force && !compactor(false).should_compact(tokens, window) {
        return Ok(false);
    }
    // A guest's words never become the owner's memory: facts are
    // extracted only in the owner's turns of sessions no guest wrote in
    // (a group's may hold both).
    let extract = job.principal.is_owner() && !guests_wrote(job).await?;
    let report = compactor(extract)
        .compact(
            shared.store.as_ref(),
            &job.session,
            Budget { window, overhead },
            force,
            &job.cancel,
        )
        .await;
    match report {
        Ok(Some(report)) => {
            job.events.publish(crate::compact::event(&report));
            *history = load_history(job).await?;
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(CompactionError::Cancelled) => Err(Error::Cancelled),
        Err(CompactionError::Store(error)) => Err(error.into()),
    }
}

/// One model call with the session's history. A call cut short after its
/// answer began (cancelled, or its stream broke) still leaves a usage row,
/// marked partial: its input as estimated, its output as streamed so far.
async fn call_model(
    job: &TurnJob,
    route: &Route,
    system: &str,
    history: &[Message],
    tools: &[ToolSpec],
) -> Result<Step> {
    let shared = &job.shared;
    let request = ModelRequest {
        model: Cow::Borrowed(""),
        system: Some(Cow::Borrowed(system)),
        messages: Cow::Borrowed(history),
        tools: Cow::Borrowed(tools),
        max_tokens: shared.max_tokens,
        temperature: None,
    };
    let mut cut = None;
    let result = stream_model(job, route, request, &mut cut).await;
    if let Some(CutShort { model, streamed }) = cut {
        let counter = flynn_models::token_counter(shared.router.token_counting(), model.model());
        let usage = Usage {
            input_tokens: count(counter.count_request(Some(system), history, tools)),
            output_tokens: count(counter.count_text(&streamed)),
            ..Usage::default()
        };
        let record = UsageRecord {
            session: job.session.clone(),
            provider: model.provider().to_owned(),
            model: model.model().to_owned(),
            tier: route.tier,
            purpose: route.purpose,
            usage,
            cost_usd: shared.prices.cost(model.provider(), model.model(), &usage),
            partial: true,
        };
        if let Err(error) = shared.store.record_usage(&record).await {
            tracing::error!(session = %job.session, %error, "cannot record the usage of a model call cut short");
        }
    }
    result
}

fn count(tokens: usize) -> u64 {
    u64::try_from(tokens).unwrap_or(u64::MAX)
}

/// A model call whose answer began but did not complete.
struct CutShort {
    model: ModelRef,
    /// The text and thinking streamed before it ended.
    streamed: String,
}

async fn stream_model(
    job: &TurnJob,
    route: &Route,
    request: ModelRequest<'_>,
    cut: &mut Option<CutShort>,
) -> Result<Step> {
    let router = &job.shared.router;
    let cancel = &job.cancel;
    let routed = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(Error::Cancelled),
        routed = async {
            match &route.model {
                Some(model) => router.stream_model(model, request).await,
                None => router.stream(route.tier, request).await,
            }
        } => routed?,
    };
    let RoutedStream {
        model,
        mut stream,
        failed,
    } = routed;
    for attempt in failed {
        job.events.publish(AgentEvent::Warning {
            message: format!(
                "{} failed, fell back to {model}: {}",
                attempt.model, attempt.error
            ),
        });
    }
    let mut streamed = String::new();
    let error: Error = loop {
        let event = tokio::select! {
            biased;
            () = cancel.cancelled() => break Error::Cancelled,
            event = stream.next() => event,
        };
        match event {
            Some(Ok(StreamEvent::TextDelta(text))) => {
                streamed.push_str(&text);
                job.events.publish(AgentEvent::ContentDelta { text });
            }
            Some(Ok(StreamEvent::ThinkingDelta(text))) => {
                streamed.push_str(&text);
                job.events.publish(AgentEvent::Thinking { text });
            }
            Some(Ok(StreamEvent::ToolUseStart { .. })) => {}
            Some(Ok(StreamEvent::Completed(response))) => return Ok(Step { response, model }),
            Some(Err(error)) => break error.into(),
            None => {
                break flynn_models::Error::Stream {
                    provider: model.provider().to_owned(),
                    message: "the stream ended before the answer was complete".to_owned(),
                }
                .into();
            }
        }
    };
    *cut = Some(CutShort { model, streamed });
    Err(error)
}

/// Runs the calls, in order; consecutive calls of tools that may run in
/// parallel (read-only ones) run together. Every call gets a result, even
/// when the turn is cancelled half-way, so the history stays well-formed.
async fn run_tools(
    job: &TurnJob,
    calls: &[ToolCall],
    ctx: &ToolContext,
    summary: &mut Vec<ToolCallSummary>,
) -> Vec<ContentBlock> {
    let executor = &job.shared.executor;
    // A deferred tool called by its wire name before it was found goes by
    // its own name from here on (events, summary, gate).
    let calls: Vec<ToolCall> = calls.iter().map(|c| executor.resolve(c, ctx)).collect();
    let calls = calls.as_slice();
    let parallel = |call: &ToolCall| {
        executor
            .registry()
            .get(&call.name)
            .is_some_and(|tool| tool.parallel_safe())
    };
    let mut results = Vec::with_capacity(calls.len());
    // Images the tools attached go after every result: Anthropic wants
    // the results first, and the other providers' mappers move them.
    let mut images = Vec::new();
    let mut start = 0;
    while start < calls.len() {
        let mut end = start + 1;
        if parallel(&calls[start]) {
            while end < calls.len() && parallel(&calls[end]) {
                end += 1;
            }
        }
        let batch = &calls[start..end];
        for call in batch {
            job.events.publish(AgentEvent::ToolStart {
                id: call.id.clone(),
                name: call.name.clone(),
                input: call.arguments.clone(),
            });
        }
        let done = futures::future::join_all(batch.iter().map(|call| async move {
            let result = match flynn_protocol::invalid_arguments(&call.arguments) {
                Some(text) => not_json(call, text),
                None => executor.execute(call, ctx).await,
            };
            job.events.publish(AgentEvent::ToolEnd {
                id: call.id.clone(),
                name: call.name.clone(),
                ok: !result.is_error,
                output: result.content.clone(),
            });
            condense(job, call, result, ctx).await
        }))
        .await;
        for (call, result) in batch.iter().zip(done) {
            summary.push(ToolCallSummary {
                name: call.name.clone(),
                ok: !result.is_error,
            });
            results.push(ContentBlock::ToolResult {
                tool_use_id: result.tool_use_id,
                content: result.content,
                is_error: result.is_error,
            });
            images.extend(
                result
                    .images
                    .into_iter()
                    .map(|source| ContentBlock::Image { source }),
            );
        }
        start = end;
    }
    results.extend(images);
    results
}

/// The error result of a call whose arguments the model wrote as
/// something other than JSON: the tool does not run, and the model learns
/// why and can try again.
fn not_json(call: &ToolCall, text: &str) -> ToolResult {
    let error = serde_json::from_str::<serde_json::Value>(text)
        .err()
        .map_or_else(String::new, |error| format!(" ({error})"));
    ToolResult {
        tool_use_id: call.id.clone(),
        content: format!(
            "invalid arguments for {}: they are not valid JSON{error}: {text}; call the tool again with its arguments as one JSON object",
            call.name
        ),
        is_error: true,
        images: Vec::new(),
    }
}

/// Instructions for condensing a tool's output.
pub const TOOL_SUMMARY_PROMPT: &str = "You condense the output of a tool an AI assistant called, so the assistant can go on with its task. Keep every fact it may need: names, numbers, paths, errors, and the lines that answer what the call was for, quoted exactly. Leave out repetition and noise. Answer with the condensed output only.";

/// A successful output longer than `tools.summarise_over_bytes` is kept
/// whole in the session and replaced, for the model, by a summary from the
/// `tool_summarisation` tier with a note naming the call id for
/// `tool.output`. If the summary cannot be had, the output stays as it is.
async fn condense(
    job: &TurnJob,
    call: &ToolCall,
    result: ToolResult,
    ctx: &ToolContext,
) -> ToolResult {
    let shared = &job.shared;
    let Some(limit) = shared.orchestrator.settings().summarise_over_bytes else {
        return result;
    };
    if result.is_error || result.content.len() <= limit || call.name == TOOL_OUTPUT {
        return result;
    }
    let kept = shared
        .store
        .put_tool_output(
            &job.session,
            &flynn_sessions::ToolOutput {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                content: result.content.clone(),
                created_at: now_millis(),
            },
        )
        .await;
    if let Err(error) = kept {
        tracing::warn!(tool = %call.name, %error, "cannot keep a tool output; passing it on whole");
        return result;
    }
    let untrusted = shared
        .executor
        .registry()
        .get(&call.name)
        .is_some_and(|tool| tool.untrusted_output());
    let request = SubAgentRequest {
        depth: job.lineage.depth(),
        max_tokens: Some(1024),
        ..SubAgentRequest::new(
            Purpose::ToolSummarisation,
            job.session.clone(),
            TOOL_SUMMARY_PROMPT,
            format!(
                "The assistant called {} with {}. Its output ({} bytes):\n\n{}",
                call.name,
                call.arguments,
                result.content.len(),
                result.content
            ),
        )
    };
    match shared.orchestrator.delegate(request, &job.cancel).await {
        Ok(summary) if !summary.content.trim().is_empty() => {
            if let Some(catalog) = &ctx.catalog {
                catalog.reveal(TOOL_OUTPUT);
            }
            let mut body = summary.content;
            if untrusted {
                // Condensed web content is still web content.
                body = flynn_tools::wrap_untrusted(&call.name, &body);
            }
            ToolResult {
                content: format!(
                    "[condensed from {} bytes by the {} tier; the whole output: tool.output {{\"id\": \"{}\"}}]\n{body}",
                    result.content.len(),
                    summary.tier,
                    call.id
                ),
                ..result
            }
        }
        Ok(_) => result,
        Err(error) => {
            tracing::warn!(tool = %call.name, %error, "cannot condense a tool output; passing it on whole");
            result
        }
    }
}

/// Turns the tool gate's confirmation steps into events.
struct GateEvents(TurnPublisher);

impl GateObserver for GateEvents {
    fn confirmation_requested(&self, request: &ApprovalRequest) {
        self.0.publish(AgentEvent::ConfirmationRequested {
            id: request.call_id.clone(),
            name: request.tool.clone(),
            input: request.input.clone(),
            effect: request.effect,
            timeout_secs: request.timeout.as_secs(),
            reason: request.reason.clone(),
        });
    }

    fn confirmation_resolved(&self, request: &ApprovalRequest, resolution: Resolution) {
        self.0.publish(AgentEvent::ConfirmationResolved {
            id: request.call_id.clone(),
            resolution,
        });
    }
}
