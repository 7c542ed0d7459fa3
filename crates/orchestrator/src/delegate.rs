//! Delegation: stateless model calls on the tier a purpose is configured
//! for, costed to that tier and purpose.

use std::borrow::Cow;
use std::sync::Arc;

use flynn_models::{ModelRequest, ModelRouter, PriceTable};
use flynn_protocol::config::{
    AgentsConfig, DelegationConfig, FlynnConfig, ModelRef, SessionAccess, SubagentsConfig,
    TokenCounting,
};
use flynn_protocol::{Message, Purpose, SessionKey, Tier, Usage};
use flynn_sessions::{UsageLog, UsageRecord};
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// Records a usage row when dropped while it still holds one: a delegated
/// call that ended before its answer was in, with its input tokens
/// estimated. The row is written on a task of its own, since the call's
/// future may be dropped at any await.
struct CutShortUsage {
    store: Arc<dyn UsageLog>,
    pending: Option<CutShort>,
}

struct CutShort {
    record: UsageRecord,
    call: ModelRequest<'static>,
    counting: TokenCounting,
    /// USD per input token, when the model's price is known.
    input_price: Option<f64>,
}

impl Drop for CutShortUsage {
    fn drop(&mut self) {
        let Some(CutShort {
            mut record,
            call,
            counting,
            input_price,
        }) = self.pending.take()
        else {
            return;
        };
        let counter = flynn_models::token_counter(counting, &record.model);
        let input = counter.count_request(call.system.as_deref(), &call.messages, &call.tools);
        record.usage.input_tokens = u64::try_from(input).unwrap_or(u64::MAX);
        #[allow(clippy::cast_precision_loss)]
        let tokens = input as f64;
        record.cost_usd = input_price.map(|price| price * tokens);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(session = %record.session, "no runtime left to record the usage of a delegated call cut short");
            return;
        };
        let store = self.store.clone();
        runtime.spawn(async move {
            if let Err(error) = store.record_usage(&record).await {
                tracing::error!(session = %record.session, %error, "cannot record the usage of a delegated call cut short");
            }
        });
    }
}

/// What the runtime needs to know about delegation, sub-agents and
/// escalation (`agents.*`), and about condensing long tool output.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationSettings {
    pub tiers: DelegationConfig,
    pub max_depth: u32,
    pub auto_escalate: bool,
    pub subagents: SubagentsConfig,
    pub session_access: SessionAccess,
    /// `tools.summarise_over_bytes`.
    pub summarise_over_bytes: Option<usize>,
}

impl Default for DelegationSettings {
    fn default() -> Self {
        Self::from_agents(&AgentsConfig::default(), None)
    }
}

impl DelegationSettings {
    pub fn from_config(config: &FlynnConfig) -> Self {
        Self::from_agents(&config.agents, config.tools.summarise_over_bytes)
    }

    pub fn from_agents(agents: &AgentsConfig, summarise_over_bytes: Option<usize>) -> Self {
        DelegationSettings {
            tiers: agents.delegation.clone(),
            max_depth: agents.max_delegation_depth,
            auto_escalate: agents.auto_escalate,
            subagents: agents.subagents.clone(),
            session_access: agents.session_access,
            summarise_over_bytes,
        }
    }
}

/// One stateless task for a model: no session history, no tools.
#[derive(Debug, Clone)]
pub struct SubAgentRequest {
    pub purpose: Purpose,
    /// The tier to use; `agents.delegation`'s tier for the purpose when
    /// `None` (the default tier for purposes without one).
    pub tier: Option<Tier>,
    /// Instructions for the task.
    pub system: String,
    /// The task.
    pub message: String,
    /// The longest answer wanted, in tokens; the runtime's limit when `None`.
    pub max_tokens: Option<u32>,
    /// The session the work is done for; its usage is recorded there.
    pub session: SessionKey,
    /// How deep in delegation the caller already is: 0 for a turn, 1 for a
    /// sub-agent... The call itself is one deeper.
    pub depth: u32,
}

impl SubAgentRequest {
    pub fn new(
        purpose: Purpose,
        session: SessionKey,
        system: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        SubAgentRequest {
            purpose,
            tier: None,
            system: system.into(),
            message: message.into(),
            max_tokens: None,
            session,
            depth: 0,
        }
    }
}

/// What a delegated call answered, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct SubAgentResult {
    pub content: String,
    pub tier: Tier,
    pub model: ModelRef,
    pub usage: Usage,
    /// USD; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
}

/// Runs background work on cheap tiers: every model call that is not a
/// turn's own (compaction summaries, memory extraction, tool-output
/// summaries, single-answer sub-agents) goes through
/// [`delegate`](Self::delegate), which picks the purpose's tier
/// (`agents.delegation`), enforces `agents.max_delegation_depth`, and
/// records the usage under the tier and the purpose.
#[derive(Clone)]
pub struct AgentOrchestrator {
    router: Arc<ModelRouter>,
    store: Arc<dyn UsageLog>,
    prices: PriceTable,
    settings: DelegationSettings,
    max_tokens: u32,
}

impl std::fmt::Debug for AgentOrchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentOrchestrator")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl AgentOrchestrator {
    pub fn new(
        router: Arc<ModelRouter>,
        store: Arc<dyn UsageLog>,
        prices: PriceTable,
        settings: DelegationSettings,
    ) -> Self {
        let max_tokens = router.max_tokens();
        AgentOrchestrator {
            router,
            store,
            prices,
            settings,
            max_tokens,
        }
    }

    pub fn settings(&self) -> &DelegationSettings {
        &self.settings
    }

    pub fn router(&self) -> &Arc<ModelRouter> {
        &self.router
    }

    /// The tier work of this purpose runs on.
    pub fn tier_for(&self, purpose: Purpose) -> Tier {
        self.settings.tiers.tier_for(purpose).unwrap_or_default()
    }

    /// Runs one stateless call and records its usage. Fails when the call
    /// would nest deeper than `agents.max_delegation_depth`, when `cancel`
    /// fires, or when every model of the tier fails.
    pub async fn delegate(
        &self,
        request: SubAgentRequest,
        cancel: &CancellationToken,
    ) -> Result<SubAgentResult> {
        let depth = request.depth + 1;
        if depth > self.settings.max_depth {
            return Err(Error::DelegationTooDeep {
                depth,
                max: self.settings.max_depth,
            });
        }
        let tier = request
            .tier
            .unwrap_or_else(|| self.tier_for(request.purpose));
        let call = ModelRequest {
            model: Cow::Borrowed(""),
            system: Some(Cow::Owned(request.system)),
            messages: Cow::Owned(vec![Message::user(request.message)]),
            tools: Cow::Borrowed(&[]),
            max_tokens: request.max_tokens.unwrap_or(self.max_tokens),
            temperature: None,
        };
        let routed = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(Error::Cancelled),
            routed = self.router.stream(tier, call.for_model("")) => routed?,
        };
        let model = routed.model.clone();
        let provider = model.provider().to_owned();
        let record = |usage: Usage, partial: bool| UsageRecord {
            session: request.session.clone(),
            provider: provider.clone(),
            model: model.model().to_owned(),
            tier,
            purpose: request.purpose,
            usage,
            cost_usd: self.prices.cost(model.provider(), model.model(), &usage),
            partial,
        };
        // Until the answer is in, the call's usage is recorded (marked
        // partial) however it ends: cancelled, failed, or dropped by a
        // caller's timeout (the summariser's, a sub-agent's).
        let per_million = Usage {
            input_tokens: 1_000_000,
            ..Usage::default()
        };
        let mut guard = CutShortUsage {
            store: self.store.clone(),
            pending: Some(CutShort {
                input_price: record(per_million, true)
                    .cost_usd
                    .map(|cost| cost / 1_000_000.0),
                record: record(Usage::default(), true),
                call,
                counting: self.router.token_counting(),
            }),
        };
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(Error::Cancelled),
            response = flynn_models::drain(&provider, routed.stream) => response?,
        };
        guard.pending = None;
        let done = record(response.usage, false);
        let cost_usd = done.cost_usd;
        self.store.record_usage(&done).await?;
        tracing::debug!(
            purpose = %request.purpose,
            %tier,
            %model,
            input = response.usage.input_tokens,
            output = response.usage.output_tokens,
            "delegated call"
        );
        Ok(SubAgentResult {
            content: response.message.text(),
            tier,
            model,
            usage: response.usage,
            cost_usd,
        })
    }
}
