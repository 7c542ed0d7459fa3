use std::path::PathBuf;
use std::sync::Arc;

use flynn_models::{ModelRouter, PriceTable};
use flynn_orchestrator::{Agent, AgentSettings, DEFAULT_SYSTEM_PROMPT, TurnRequest};
use flynn_protocol::config::FlynnConfig;
use flynn_protocol::{AgentEvent, TurnOutcome};
use flynn_sessions::{SessionStore, SqliteStore};
use flynn_tools::{Tool, ToolExecutor, TypedTool};
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// Collects what a [`Flynn`] is made of.
#[derive(Default)]
pub struct FlynnBuilder {
    config: FlynnConfig,
    home: Option<PathBuf>,
    workspace: Option<PathBuf>,
    tools: Vec<Arc<dyn Tool>>,
    store: Option<Arc<dyn SessionStore>>,
}

impl std::fmt::Debug for FlynnBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlynnBuilder")
            .field("home", &self.home)
            .field("workspace", &self.workspace)
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl FlynnBuilder {
    /// The configuration (see `flynn_core::config::load` to read a file).
    pub fn config(mut self, config: FlynnConfig) -> Self {
        self.config = config;
        self
    }

    /// Directory for Flynn's data (`sessions.db`...). Required unless a
    /// store is given, or `sessions.database` names the file.
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Directory tools run in; `tools.workspace`, else the current directory.
    pub fn workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = Some(workspace.into());
        self
    }

    /// Offers one more tool to the model.
    pub fn tool<T: TypedTool>(mut self, tool: T) -> Self {
        self.tools.push(flynn_tools::into_dyn(tool));
        self
    }

    /// Offers an already type-erased tool.
    pub fn tool_dyn(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Uses this session store instead of opening `sessions.db`.
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    pub async fn build(self) -> Result<Flynn> {
        let config = self.config;
        let router = ModelRouter::from_config(&config.providers, &config.models)?;

        let mut registry = flynn_tools::builtin::registry(&config.tools)
            .map_err(|unknown| Error::Config(unknown.to_string()))?;
        for tool in self.tools {
            registry.register_dyn(tool);
        }
        let executor = ToolExecutor::new(Arc::new(registry), config.tools.output_limit_bytes);

        let store = match self.store {
            Some(store) => store,
            None => {
                if config.sessions.database.is_none() && self.home.is_none() {
                    return Err(Error::Config(
                        "no place for the session database: set sessions.database or give FlynnBuilder::home"
                            .to_owned(),
                    ));
                }
                let home = self.home.clone().unwrap_or_default();
                let path = flynn_sessions::database_path(&config.sessions, &home);
                Arc::new(SqliteStore::open(&path).await?) as Arc<dyn SessionStore>
            }
        };

        let workspace = match self.workspace.or_else(|| config.tools.workspace.clone()) {
            Some(dir) => dir,
            None => std::env::current_dir().map_err(|e| {
                Error::Config(format!("cannot read the current directory for tools: {e}"))
            })?,
        };
        let settings = AgentSettings {
            system_prompt: config
                .agents
                .system_prompt
                .clone()
                .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
            max_iterations: config.agents.max_iterations,
            max_tokens: config.models.max_tokens,
            workspace,
            tier: config.agents.primary_tier,
            prices: PriceTable::new(&config.providers, &config.models.prices),
        };
        Ok(Flynn {
            agent: Agent::new(Arc::new(router), executor, store, settings),
        })
    }
}

/// A ready Flynn runtime.
#[derive(Debug)]
pub struct Flynn {
    agent: Agent,
}

impl Flynn {
    pub fn builder() -> FlynnBuilder {
        FlynnBuilder::default()
    }

    /// Answers one message; see [`Agent::run_turn`].
    pub async fn send(
        &self,
        request: TurnRequest,
        cancel: CancellationToken,
        on_event: &mut (dyn FnMut(AgentEvent) + Send),
    ) -> Result<TurnOutcome> {
        Ok(self.agent.run_turn(request, cancel, on_event).await?)
    }

    /// The conversations.
    pub fn sessions(&self) -> &Arc<dyn SessionStore> {
        self.agent.store()
    }

    pub fn agent(&self) -> &Agent {
        &self.agent
    }
}
