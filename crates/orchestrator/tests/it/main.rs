//! The session manager against scripted in-process models, real tools and
//! a real SQLite store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "telegram")]
mod attachments;
mod automation;
mod channels;
mod commands;
mod compaction;
mod delegation;
mod lanes;
mod memory;
mod principals;
mod recovery;
mod skills;
mod taint;
mod turns;

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use flynn_models::{
    ClientInfo, Error as ModelError, ModelClient, ModelRequest, ModelResponse, ModelRouter,
    ModelStream, PriceTable, StopReason, StreamEvent,
};
use flynn_orchestrator::DelegationSettings;
use flynn_orchestrator::{
    AgentEvent, Agents, EventStream, Followed, RuntimeParts, SessionManager, Submitted, TurnHandle,
    TurnRequest,
};
use flynn_protocol::config::{
    AgentsConfig, Autonomy, CompactionConfig, HookAction, HookRule, ModelsConfig, ProviderKind,
    SessionsConfig, TiersConfig, ToolsConfig,
};
use flynn_protocol::{ContentBlock, Message, Role, SessionKey, TurnOutcome, Usage};
use flynn_sessions::{Conversations, SessionStore, SqliteStore};
use flynn_tools::ToolExecutor;
use serde_json::json;

/// What a scripted model answers to one call.
pub enum Script {
    /// A whole answer.
    Reply(Result<Message, ModelError>),
    /// Streams this text, then never finishes (until dropped).
    Hang(String),
}

/// A model that answers from a script (or, with none left, echoes the
/// last user text as "re: <text>") and records what it was asked.
pub struct Scripted {
    info: ClientInfo,
    script: Mutex<VecDeque<Script>>,
    pub requests: Mutex<Vec<ModelRequest>>,
    /// Extra deltas streamed before each answer (for lag tests).
    pub extra_deltas: Mutex<usize>,
}

impl Scripted {
    pub fn new(name: &str, script: Vec<Script>) -> Arc<Self> {
        Arc::new(Scripted {
            info: ClientInfo::new(name, ProviderKind::OpenaiCompatible, false),
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
            extra_deltas: Mutex::new(0),
        })
    }

    pub fn replies(name: &str, replies: Vec<Message>) -> Arc<Self> {
        Self::new(
            name,
            replies.into_iter().map(|r| Script::Reply(Ok(r))).collect(),
        )
    }

    pub fn echo(name: &str) -> Arc<Self> {
        Self::new(name, vec![])
    }

    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

pub fn last_user_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn completed(message: Message, model: String) -> StreamEvent {
    let stop_reason = if message.tool_uses().next().is_some() {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    StreamEvent::Completed(ModelResponse {
        message,
        stop_reason,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 3,
            ..Usage::default()
        },
        model,
    })
}

#[async_trait]
impl ModelClient for Scripted {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let model = request.model.clone();
        let echo = format!("re: {}", last_user_text(&request.messages));
        self.requests.lock().unwrap().push(request);
        let next = self.script.lock().unwrap().pop_front();
        let extra = *self.extra_deltas.lock().unwrap();
        match next {
            Some(Script::Hang(text)) => {
                let first = futures::stream::iter(vec![Ok(StreamEvent::TextDelta(text))]);
                Ok(Box::pin(futures::StreamExt::chain(
                    first,
                    futures::stream::pending(),
                )))
            }
            Some(Script::Reply(reply)) => {
                let reply = reply?;
                let mut events: Vec<Result<StreamEvent, ModelError>> = (0..extra)
                    .map(|i| Ok(StreamEvent::TextDelta(format!("{i} "))))
                    .collect();
                let text = reply.text();
                if !text.is_empty() {
                    events.push(Ok(StreamEvent::TextDelta(text)));
                }
                events.push(Ok(completed(reply, model)));
                Ok(Box::pin(futures::stream::iter(events)))
            }
            None => {
                let reply = Message::assistant(echo.clone());
                Ok(Box::pin(futures::stream::iter(vec![
                    Ok(StreamEvent::TextDelta(echo)),
                    Ok(completed(reply, model)),
                ])))
            }
        }
    }
}

pub fn tool_use(id: &str, command: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "shell.exec".into(),
            input: json!({"command": command}),
        }],
    }
}

/// Shell calls ask for confirmation.
pub fn confirm_shell() -> ToolsConfig {
    ToolsConfig {
        hooks: vec![HookRule {
            tool: "shell.*".into(),
            action: HookAction::Confirm,
        }],
        ..ToolsConfig::default()
    }
}

pub fn tiers(default: &[&str]) -> ModelsConfig {
    ModelsConfig {
        tiers: TiersConfig {
            default: default.iter().map(|m| m.parse().unwrap()).collect(),
            ..TiersConfig::default()
        },
        ..ModelsConfig::default()
    }
}

/// What a test runtime is built from.
pub struct Setup {
    pub models: ModelsConfig,
    pub agents: AgentsConfig,
    pub tools: ToolsConfig,
    pub sessions: SessionsConfig,
    pub prices: PriceTable,
    pub compaction: CompactionConfig,
    pub memory_flush: Option<Arc<dyn flynn_context::MemoryFlush>>,
    pub memory: Option<flynn_orchestrator::MemoryRuntime>,
    pub skills: Option<flynn_orchestrator::SkillsRuntime>,
    /// Its `cron.*` tools are registered (bind it to the manager after).
    pub automation: Option<flynn_orchestrator::Automation>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            models: tiers(&["m/one"]),
            agents: AgentsConfig::default(),
            // Tools run without asking unless a test's hooks say otherwise.
            tools: ToolsConfig {
                autonomy: Autonomy::Full,
                ..ToolsConfig::default()
            },
            sessions: SessionsConfig::default(),
            prices: PriceTable::default(),
            compaction: CompactionConfig::default(),
            memory_flush: None,
            memory: None,
            skills: None,
            automation: None,
        }
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub manager: SessionManager,
    pub store: Arc<SqliteStore>,
}

impl Harness {
    pub async fn new(clients: Vec<Arc<Scripted>>, setup: Setup) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        Self::in_dir(dir, clients, setup).await
    }

    pub async fn in_dir(dir: tempfile::TempDir, clients: Vec<Arc<Scripted>>, setup: Setup) -> Self {
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let manager = manager(dir.path(), store.clone(), clients, setup);
        Harness {
            dir,
            manager,
            store,
        }
    }

    /// Sends a message and waits for its turn, collecting the turn's events.
    pub async fn send(
        &self,
        key: &SessionKey,
        text: &str,
    ) -> (
        Result<TurnOutcome, flynn_orchestrator::Error>,
        Vec<AgentEvent>,
    ) {
        self.send_request(TurnRequest::text(key.clone(), text))
            .await
    }

    pub async fn send_request(
        &self,
        request: TurnRequest,
    ) -> (
        Result<TurnOutcome, flynn_orchestrator::Error>,
        Vec<AgentEvent>,
    ) {
        let mut turn = match self.manager.submit_and_follow(request).await {
            Ok(Followed::Turn(turn)) => turn,
            Ok(Followed::Command { reply, .. }) => panic!("a command, not a turn: {reply}"),
            Err(error) => return (Err(error), vec![]),
        };
        let mut events = Vec::new();
        while let Some(event) = turn.next().await {
            let envelope = event.unwrap();
            if envelope.turn == Some(turn.turn()) {
                events.push(envelope.event);
            }
        }
        (turn.outcome().await, events)
    }

    pub async fn submit(&self, key: &SessionKey, text: &str) -> TurnHandle {
        match self
            .manager
            .submit(TurnRequest::text(key.clone(), text))
            .await
            .unwrap()
        {
            Submitted::Turn(handle) => handle,
            Submitted::Command { reply, .. } => panic!("a command, not a turn: {reply}"),
        }
    }

    pub async fn command(&self, key: &SessionKey, text: &str) -> String {
        match self
            .manager
            .submit(TurnRequest::text(key.clone(), text))
            .await
            .unwrap()
        {
            Submitted::Command { reply, .. } => reply,
            Submitted::Turn(_) => panic!("a turn, not a command"),
        }
    }

    pub async fn history(&self, key: &SessionKey) -> Vec<Message> {
        self.store
            .history(key)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.message)
            .collect()
    }
}

pub fn manager(
    workspace: &Path,
    store: Arc<SqliteStore>,
    clients: Vec<Arc<Scripted>>,
    setup: Setup,
) -> SessionManager {
    let clients = clients
        .into_iter()
        .map(|c| (c.info.provider.clone(), c as Arc<dyn ModelClient>))
        .collect();
    manager_with(workspace, store, clients, setup)
}

/// A runtime over any model clients, keyed by provider name.
pub fn manager_with(
    workspace: &Path,
    store: Arc<dyn SessionStore>,
    clients: HashMap<String, Arc<dyn ModelClient>>,
    setup: Setup,
) -> SessionManager {
    let router = Arc::new(ModelRouter::new(clients, setup.models.clone()));
    let mut registry = flynn_tools::builtin::registry(&setup.tools);
    let mut agents = Agents::from_config(&setup.agents, &setup.tools, workspace).unwrap();
    if let Some(memory) = &setup.memory {
        for tool in memory.tools() {
            registry.register_dyn(tool);
        }
        agents.add_slot(memory.slot());
    }
    if let Some(skills) = &setup.skills {
        for tool in skills.tools() {
            registry.register_dyn(tool);
        }
        agents.add_slot(skills.slot());
    }
    if let Some(automation) = &setup.automation {
        for tool in automation.tools() {
            registry.register_dyn(tool);
        }
    }
    let executor = ToolExecutor::from_config(Arc::new(registry), &setup.tools);
    SessionManager::new(RuntimeParts {
        router,
        store,
        executor,
        agents,
        prices: setup.prices,
        max_tokens: setup.models.max_tokens,
        sessions: setup.sessions,
        delegation: DelegationSettings::from_agents(
            &setup.agents,
            setup.tools.summarise_over_bytes,
        ),
        compaction: setup.compaction,
        memory_flush: setup.memory_flush,
        memory: setup.memory,
    })
}

/// A runtime over one model client (provider `m`) and a fresh store.
pub async fn with_model(
    dir: &Path,
    model: Arc<dyn ModelClient>,
) -> (SessionManager, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(&dir.join("s.db")).await.unwrap());
    let clients = HashMap::from([("m".to_owned(), model)]);
    let manager = manager_with(dir, store.clone(), clients, Setup::default());
    (manager, store)
}

/// The events of `turn` already published or still to come, up to its
/// last `run_state`.
pub async fn drain_turn(events: &mut EventStream, turn: flynn_protocol::TurnId) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    while let Some(event) = events.next().await {
        let envelope = event.unwrap();
        if envelope.turn != Some(turn) {
            continue;
        }
        let end = matches!(envelope.event, AgentEvent::RunState { state } if state.is_terminal());
        out.push(envelope.event);
        if end {
            break;
        }
    }
    out
}

pub fn key(s: &str) -> SessionKey {
    s.parse().unwrap()
}
