use std::path::PathBuf;
use std::sync::Arc;

use flynn_models::{
    ModelRequest, ModelResponse, ModelRouter, PriceTable, RoutedStream, StreamEvent,
};
use flynn_protocol::config::ModelRef;
use flynn_protocol::{
    AgentEvent, ContentBlock, Message, Role, RunState, SessionKey, Tier, ToolCall, ToolCallSummary,
    TurnOutcome, Usage,
};
use flynn_sessions::{SessionStore, UsageRecord};
use flynn_tools::{ToolContext, ToolExecutor};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// The system prompt used when the config sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are Flynn, a personal AI assistant running on your owner's machine. \
Answer concisely. Use the tools when they help; say what you did.";

/// How the agent behaves.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub system_prompt: String,
    /// Model calls per turn before stopping with a partial answer.
    pub max_iterations: u32,
    pub max_tokens: u32,
    /// Where tools run.
    pub workspace: PathBuf,
    /// Tier used when a turn names none.
    pub tier: Tier,
    /// What model calls cost, for the usage records.
    pub prices: PriceTable,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
            max_iterations: 10,
            max_tokens: 4096,
            workspace: PathBuf::from("."),
            tier: Tier::Default,
            prices: PriceTable::default(),
        }
    }
}

/// One user message to answer.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub session: SessionKey,
    pub content: Vec<ContentBlock>,
    /// Overrides the agent's tier.
    pub tier: Option<Tier>,
    /// Pins one model, with no fallback.
    pub model: Option<ModelRef>,
}

impl TurnRequest {
    pub fn text(session: SessionKey, text: impl Into<String>) -> Self {
        TurnRequest {
            session,
            content: vec![ContentBlock::text(text)],
            tier: None,
            model: None,
        }
    }
}

/// Runs turns against a model router, a tool executor and a session store.
pub struct Agent {
    router: Arc<ModelRouter>,
    executor: ToolExecutor,
    store: Arc<dyn SessionStore>,
    settings: AgentSettings,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("router", &self.router)
            .field("executor", &self.executor)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What one model call produced.
struct Step {
    response: ModelResponse,
    model: ModelRef,
}

impl Agent {
    pub fn new(
        router: Arc<ModelRouter>,
        executor: ToolExecutor,
        store: Arc<dyn SessionStore>,
        settings: AgentSettings,
    ) -> Self {
        Agent {
            router,
            executor,
            store,
            settings,
        }
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    /// Answers one user message. Events go to `on_event` as they happen;
    /// the last one is `Done` or `Error`. The user message is stored before
    /// the model is called, and every model answer and tool result as soon
    /// as it exists, so a crash mid-turn loses nothing already said.
    pub async fn run_turn(
        &self,
        request: TurnRequest,
        cancel: CancellationToken,
        on_event: &mut (dyn FnMut(AgentEvent) + Send),
    ) -> Result<TurnOutcome> {
        on_event(AgentEvent::RunState {
            state: RunState::Start,
        });
        let result = self.turn(request, &cancel, on_event).await;
        match &result {
            Ok(outcome) => {
                on_event(AgentEvent::Done {
                    outcome: outcome.clone(),
                });
                on_event(AgentEvent::RunState {
                    state: RunState::Complete,
                });
            }
            Err(Error::Cancelled) => on_event(AgentEvent::RunState {
                state: RunState::Cancelled,
            }),
            Err(error) => {
                on_event(AgentEvent::Error {
                    code: error.code(),
                    message: error.to_string(),
                });
                on_event(AgentEvent::RunState {
                    state: RunState::Error,
                });
            }
        }
        result
    }

    async fn turn(
        &self,
        request: TurnRequest,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(AgentEvent) + Send),
    ) -> Result<TurnOutcome> {
        let key = request.session.clone();
        let user = Message {
            role: Role::User,
            content: request.content,
        };
        self.store.append(&key, std::slice::from_ref(&user)).await?;
        let mut history = self.store.history(&key).await?;

        let tools = self.executor.registry().specs();
        let tier = request.tier.unwrap_or(self.settings.tier);
        let ctx = ToolContext {
            workspace: self.settings.workspace.clone(),
            cancel: cancel.child_token(),
        };
        let mut usage = Usage::default();
        let mut cost: Option<f64> = None;
        let mut tool_calls = Vec::new();
        let mut texts = Vec::new();
        let mut last_model = None;

        for _ in 0..self.settings.max_iterations.max(1) {
            let model_request = ModelRequest {
                model: String::new(),
                system: Some(self.settings.system_prompt.clone()),
                messages: flynn_context::normalize(history.clone()),
                tools: tools.clone(),
                max_tokens: self.settings.max_tokens,
                temperature: None,
            };
            let step = self
                .call_model(
                    tier,
                    request.model.as_ref(),
                    model_request,
                    cancel,
                    on_event,
                )
                .await?;
            usage.add(step.response.usage);
            let call_cost = self.settings.prices.cost(
                step.model.provider(),
                step.model.model(),
                &step.response.usage,
            );
            if let Some(call_cost) = call_cost {
                *cost.get_or_insert(0.0) += call_cost;
            }
            self.store
                .record_usage(&UsageRecord {
                    session: key.clone(),
                    provider: step.model.provider().to_owned(),
                    model: step.model.model().to_owned(),
                    tier,
                    usage: step.response.usage,
                    cost_usd: call_cost,
                })
                .await?;
            let message = step.response.message;
            last_model = Some(step.model);
            self.store
                .append(&key, std::slice::from_ref(&message))
                .await?;
            let text = message.text();
            if !text.is_empty() {
                texts.push(text.clone());
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

            if calls.is_empty() {
                return Ok(outcome(text, last_model, (usage, cost), tool_calls, None));
            }
            let results = self
                .run_tools(&calls, &ctx, on_event, &mut tool_calls)
                .await;
            let results = Message {
                role: Role::User,
                content: results,
            };
            self.store
                .append(&key, std::slice::from_ref(&results))
                .await?;
            history.push(results);
            if cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
        }

        let warning = format!(
            "stopped after {} model calls (agents.max_iterations) while the model was still using tools; the answer may be incomplete",
            self.settings.max_iterations.max(1)
        );
        on_event(AgentEvent::Warning {
            message: warning.clone(),
        });
        Ok(outcome(
            texts.join("\n\n"),
            last_model,
            (usage, cost),
            tool_calls,
            Some(warning),
        ))
    }

    async fn call_model(
        &self,
        tier: Tier,
        model: Option<&ModelRef>,
        request: ModelRequest,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(AgentEvent) + Send),
    ) -> Result<Step> {
        let routed = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(Error::Cancelled),
            routed = async {
                match model {
                    Some(model) => self.router.stream_model(model, request).await,
                    None => self.router.stream(tier, request).await,
                }
            } => routed?,
        };
        let RoutedStream {
            model,
            mut stream,
            failed,
        } = routed;
        for attempt in failed {
            on_event(AgentEvent::Warning {
                message: format!(
                    "{} failed, fell back to {model}: {}",
                    attempt.model, attempt.error
                ),
            });
        }
        loop {
            let event = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Error::Cancelled),
                event = stream.next() => event,
            };
            match event {
                Some(Ok(StreamEvent::TextDelta(text))) => {
                    on_event(AgentEvent::ContentDelta { text })
                }
                Some(Ok(StreamEvent::ThinkingDelta(text))) => {
                    on_event(AgentEvent::Thinking { text })
                }
                Some(Ok(StreamEvent::ToolUseStart { .. })) => {}
                Some(Ok(StreamEvent::Completed(response))) => return Ok(Step { response, model }),
                Some(Err(error)) => return Err(error.into()),
                None => {
                    return Err(flynn_models::Error::Stream {
                        provider: model.provider().to_owned(),
                        message: "the stream ended before the answer was complete".to_owned(),
                    }
                    .into());
                }
            }
        }
    }

    /// Runs the calls in order. Every call gets a result, even when the
    /// turn is cancelled half-way, so the history stays well-formed.
    async fn run_tools(
        &self,
        calls: &[ToolCall],
        ctx: &ToolContext,
        on_event: &mut (dyn FnMut(AgentEvent) + Send),
        summary: &mut Vec<ToolCallSummary>,
    ) -> Vec<ContentBlock> {
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            on_event(AgentEvent::ToolStart {
                id: call.id.clone(),
                name: call.name.clone(),
                input: call.arguments.clone(),
            });
            let result = self.executor.execute(call, ctx).await;
            on_event(AgentEvent::ToolEnd {
                id: call.id.clone(),
                name: call.name.clone(),
                ok: !result.is_error,
                output: result.content.clone(),
            });
            summary.push(ToolCallSummary {
                name: call.name.clone(),
                ok: !result.is_error,
            });
            results.push(ContentBlock::ToolResult {
                tool_use_id: result.tool_use_id,
                content: result.content,
                is_error: result.is_error,
            });
        }
        results
    }
}

fn outcome(
    reply: String,
    model: Option<ModelRef>,
    (usage, cost_usd): (Usage, Option<f64>),
    tool_calls: Vec<ToolCallSummary>,
    warning: Option<String>,
) -> TurnOutcome {
    let (provider, model) = model.map_or((String::new(), String::new()), |m| {
        (m.provider().to_owned(), m.model().to_owned())
    });
    TurnOutcome {
        reply,
        provider,
        model,
        usage,
        cost_usd,
        tool_calls,
        warning,
    }
}
