//! A real agent runtime for tests (feature `runtime`): a
//! [`SessionManager`] over [`ScriptedModel`]s, the built-in tools and a
//! real SQLite store in a temp dir, and the steps tests take with it.

// Test support: a step that cannot be done is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use flynn_context::MemoryFlush;
use flynn_models::{ModelClient, ModelRouter, PriceTable};
use flynn_orchestrator::{
    AgentEvent, Agents, DelegationSettings, Error as OrchestratorError, EventStream, Followed,
    MemoryRuntime, RuntimeParts, SessionManager, SkillsRuntime, Submitted, TurnHandle, TurnRequest,
};
use flynn_protocol::config::{
    AgentsConfig, Autonomy, CompactionConfig, HookAction, HookRule, ModelsConfig, SessionsConfig,
    TiersConfig, ToolsConfig,
};
use flynn_protocol::{Message, SessionKey, TurnOutcome};
use flynn_sessions::{Conversations, SessionStore, SqliteStore};
use flynn_tools::{Tool, ToolExecutor};

use crate::scripted::ScriptedModel;

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
    pub memory_flush: Option<Arc<dyn MemoryFlush>>,
    pub memory: Option<MemoryRuntime>,
    pub skills: Option<SkillsRuntime>,
    /// Registered beside the built-in tools (a cron runtime's `cron.*`
    /// tools, say).
    pub extra_tools: Vec<Arc<dyn Tool>>,
    /// The cluster the runtime is a node of (a PostgreSQL store's).
    pub cluster: Option<Arc<dyn flynn_sessions::Cluster>>,
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
            extra_tools: Vec::new(),
            cluster: None,
        }
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub manager: SessionManager,
    pub store: Arc<SqliteStore>,
}

impl Harness {
    pub async fn new(clients: Vec<Arc<ScriptedModel>>, setup: Setup) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        Self::in_dir(dir, clients, setup).await
    }

    pub async fn in_dir(
        dir: tempfile::TempDir,
        clients: Vec<Arc<ScriptedModel>>,
        setup: Setup,
    ) -> Self {
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
    ) -> (Result<TurnOutcome, OrchestratorError>, Vec<AgentEvent>) {
        self.send_request(TurnRequest::text(key.clone(), text))
            .await
    }

    pub async fn send_request(
        &self,
        request: TurnRequest,
    ) -> (Result<TurnOutcome, OrchestratorError>, Vec<AgentEvent>) {
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
    clients: Vec<Arc<ScriptedModel>>,
    setup: Setup,
) -> SessionManager {
    let clients = clients
        .into_iter()
        .map(|c| (c.info().provider.clone(), c as Arc<dyn ModelClient>))
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
    for tool in setup.extra_tools {
        registry.register_dyn(tool);
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
        cluster: setup.cluster,
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
