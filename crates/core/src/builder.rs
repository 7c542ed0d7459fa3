use std::path::{Path, PathBuf};
use std::sync::Arc;

use flynn_automation::{Clock, SystemClock};
use flynn_context::MemoryFlush;
use flynn_cron::Automation;
use flynn_mcp::McpServers;
use flynn_memory::Memory;
use flynn_models::{ModelRouter, PriceTable};
use flynn_orchestrator::{
    Agents, DelegationSettings, EventStream, Followed, MemoryRuntime, PromptSlot, RuntimeParts,
    SessionManager, SkillsRuntime, Submitted, TurnRequest,
};
use flynn_protocol::config::FlynnConfig;
use flynn_protocol::{AgentEvent, SessionKey, TurnOutcome};
use flynn_sessions::SessionStore;
use flynn_tools::builtin::process::ProcessInfo;
use flynn_tools::builtin::{ProcessLifetime, ProcessManager};
use flynn_tools::{AuditLog, Redactor, Tool, ToolExecutor, ToolPolicy, TypedTool};
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// Collects what a [`Flynn`] is made of.
#[derive(Default)]
pub struct FlynnBuilder {
    config: FlynnConfig,
    home: Option<PathBuf>,
    workspace: Option<PathBuf>,
    tools: Vec<Arc<dyn Tool>>,
    slots: Vec<Arc<dyn PromptSlot>>,
    store: Option<Arc<dyn SessionStore>>,
    memory_flush: Option<Arc<dyn MemoryFlush>>,
    memory: Option<Memory>,
    clock: Option<Arc<dyn Clock>>,
    secrets: Vec<String>,
    private: Vec<PathBuf>,
    processes: ProcessLifetime,
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
    /// How long background processes (`process.start`) may live:
    /// [`ProcessLifetime::Command`] for a runtime that serves one command
    /// and exits (the CLI's embedded `flynn send`), so that the model is
    /// told they end with it. [`ProcessLifetime::Runtime`] by default.
    pub fn process_lifetime(mut self, lifetime: ProcessLifetime) -> Self {
        self.processes = lifetime;
        self
    }

    /// The configuration (see `flynn_core::config::load` to read a file).
    pub fn config(mut self, config: FlynnConfig) -> Self {
        self.config = config;
        self
    }

    /// Directory for Flynn's data (`sessions.db`...). Required unless a
    /// store is given, or `sessions.url`/`sessions.database` names one.
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Directory tools run in for agents that name none, over
    /// `tools.workspace`. Without either, `FLYNN_HOME/workspace` (created
    /// 0700) when a home is given, else the current directory.
    pub fn workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = Some(workspace.into());
        self
    }

    /// Keeps these values (the resolved gateway token, say) out of tool
    /// output, errors and logs, beside the config's own secrets and the
    /// secret-looking variables of the process environment.
    pub fn secrets<S: Into<String>>(mut self, secrets: impl IntoIterator<Item = S>) -> Self {
        self.secrets.extend(secrets.into_iter().map(Into::into));
        self
    }

    /// Keeps this file or directory (the config file) out of reach of the
    /// tools and of sandboxed commands, as FLYNN_HOME is, even inside the
    /// workspace.
    pub fn private_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.private.push(path.into());
        self
    }

    /// [`private_path`](Self::private_path) for each of `paths`.
    pub fn private_paths<P: Into<PathBuf>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        self.private.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Offers one more tool (subject to the tools policy, like built-ins).
    pub fn tool<T: TypedTool>(mut self, tool: T) -> Self {
        self.tools.push(flynn_tools::into_dyn(tool));
        self
    }

    /// Offers an already type-erased tool.
    pub fn tool_dyn(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a section to every agent's system prompt, rendered each turn.
    pub fn prompt_slot(mut self, slot: Arc<dyn PromptSlot>) -> Self {
        self.slots.push(slot);
        self
    }

    /// Uses this session store instead of opening the configured one.
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Hands what compaction is about to replace to `flush` first (facts
    /// worth keeping go to memory).
    pub fn memory_flush(mut self, flush: Arc<dyn MemoryFlush>) -> Self {
        self.memory_flush = Some(flush);
        self
    }

    /// Uses this memory instead of opening the configured one
    /// (`memory.dir`, `memory.index`, `memory.embeddings`).
    pub fn memory(mut self, memory: Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Reads the time for cron jobs and the heartbeat from `clock`
    /// instead of the system clock (a `PausedClock` in tests).
    pub fn automation_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Composes the runtime. Refuses a config it cannot run (unknown
    /// providers or agents, a tools policy naming no tool) before anything
    /// is opened or stored.
    pub async fn build(self) -> Result<Flynn> {
        let mut config = self.config;
        let router = ModelRouter::from_config(&config.providers, &config.models)?;

        let memory = match self.memory {
            Some(memory) if config.memory.enabled => Some(memory),
            Some(_) => None,
            None => open_memory(&config, self.home.as_deref()).await?,
        };
        let memory = memory.map(|memory| MemoryRuntime {
            memory,
            auto_extract: config.memory.auto_extract,
            max_context_tokens: usize::try_from(config.memory.max_context_tokens)
                .unwrap_or(usize::MAX),
            context_hits: usize::try_from(config.memory.context_hits).unwrap_or(usize::MAX),
        });

        let workspace = match (
            self.workspace.or_else(|| config.tools.workspace.clone()),
            &self.home,
        ) {
            (Some(dir), _) => dir,
            (None, Some(home)) => {
                flynn_config::Workspace::resolve(None, home, None, &flynn_config::ProcessEnv)
                    .map_err(|e| Error::Config(e.to_string()))?
                    .path
            }
            (None, None) => std::env::current_dir().map_err(|e| {
                Error::Config(format!("cannot read the current directory for tools: {e}"))
            })?,
        };
        // Everything that reports on the tools (the sandbox, MCP servers)
        // sees the workspace they run in.
        config.tools.workspace = Some(workspace.clone());
        // FLYNN_HOME stays out of reach of the file tools even when the
        // owner names a workspace around it.
        let hidden: Vec<PathBuf> = self.home.iter().chain(&self.private).cloned().collect();
        // Skills: bundled, FLYNN_HOME/skills and <workspace>/skills.
        let skills = SkillsRuntime::new(self.home.clone(), workspace.clone());
        // Cron jobs and the heartbeat: run by the daemon (`Flynn::automation`),
        // their `cron.*` tools offered everywhere.
        let automation = Automation::new(
            &config.automation,
            &config.channels,
            self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
        )
        .map_err(|e| Error::Config(e.to_string()))?;

        let (mut registry, processes) = flynn_tools::builtin::registry_and_processes(
            &config.tools,
            &flynn_tools::sandbox::SandboxPaths {
                hidden: hidden.clone(),
            },
            self.processes,
        );
        // The browser keeps a profile per session in FLYNN_HOME/browser;
        // an embedder without a home registers its own
        // (`flynn_tools::builtin::register_browser`).
        #[cfg(feature = "browser")]
        if let Some(home) = &self.home {
            flynn_tools::builtin::register_browser(&mut registry, &config.tools, home);
        }
        if let Some(memory) = &memory {
            for tool in memory.tools() {
                registry.register_dyn(tool);
            }
        }
        for tool in skills.tools() {
            registry.register_dyn(tool);
        }
        for tool in automation.tools() {
            registry.register_dyn(tool);
        }
        // Voice notes into text (`voice.stt`), for the chats and the web
        // chat's microphone.
        let transcriber = match &config.voice.stt {
            Some(stt) => {
                let mut transcriber = flynn_voice::OpenAiTranscriber::new(
                    &stt.base_url,
                    stt.api_key.clone(),
                    &stt.model,
                )
                .map_err(|e| Error::Config(format!("voice.stt: {e}")))?;
                if let Some(language) = &stt.language {
                    transcriber = transcriber.language(language);
                }
                Some(Arc::new(transcriber) as Arc<dyn flynn_voice::Transcriber>)
            }
            None => None,
        };
        // Spoken answers and `voice.say` (`voice.tts`).
        let speech = match &config.voice.tts {
            Some(tts) => {
                let speech = flynn_voice::synthesizer(tts)
                    .map_err(|e| Error::Config(format!("voice.tts: {e}")))?;
                registry.register(flynn_voice::VoiceSay::new(speech.clone()));
                Some(speech)
            }
            None => None,
        };
        // The owner's Google accounts (`google`): the tools of the services
        // it names; each call reads the auth store for its tokens.
        let google = match &config.google {
            Some(block) => {
                let google =
                    flynn_google::Google::from_config(block, |name| std::env::var(name).ok())
                        .map_err(|e| Error::Config(format!("google: {e}")))?;
                let google = Arc::new(google);
                for tool in flynn_google::tools::tools(&google) {
                    registry.register_dyn(tool);
                }
                automation.set_google(google.clone());
                Some(google)
            }
            None if automation.watches_gmail() => {
                return Err(Error::Config(
                    "automation.gmail watches a Gmail mailbox, which needs the `google` block (see docs/google.md)"
                        .into(),
                ));
            }
            None => None,
        };
        for tool in self.tools {
            registry.register_dyn(tool);
        }
        // MCP servers: their tools are `<server>.<tool>`, listed once each
        // server is up.
        let mcp = McpServers::new(&config.mcp, &workspace);
        for source in mcp.sources() {
            registry.add_source(source);
        }
        ToolPolicy::new(&config.tools, None)
            .check(&registry)
            .map_err(|unknown| Error::Config(unknown.to_string()))?;
        for agent in &config.agents.list {
            if agent.tools.is_some() {
                ToolPolicy::new(&config.tools, agent.tools.as_ref())
                    .check(&registry)
                    .map_err(|unknown| {
                        Error::Config(format!("agent '{}': {unknown}", agent.name))
                    })?;
            }
        }
        for (provider, layer) in &config.tools.providers {
            if !config.providers.contains_key(provider) {
                let known: Vec<&str> = config.providers.keys().map(String::as_str).collect();
                return Err(Error::Config(format!(
                    "tools.providers.{provider}: no provider of that name is configured (providers: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )));
            }
            ToolPolicy::layered(&config.tools, std::iter::once(layer))
                .check(&registry)
                .map_err(|unknown| {
                    Error::Config(format!("tools.providers.{provider}: {unknown}"))
                })?;
        }
        let secrets = config
            .secrets()
            .into_iter()
            .chain(self.secrets)
            .chain(flynn_tools::env_secrets(std::env::vars_os()));
        let mut executor = ToolExecutor::from_config(Arc::new(registry), &config.tools)
            .with_redactor(Redactor::new(secrets))
            .with_hidden(hidden);
        let audit = &config.tools.audit;
        if audit.enabled {
            let dir = audit
                .dir
                .clone()
                .or_else(|| self.home.as_ref().map(|home| home.join("audit")));
            // An embedder with no home and no `tools.audit.dir` gets no log.
            if let Some(dir) = dir {
                executor =
                    executor.with_audit(Arc::new(AuditLog::new(dir, audit.max_bytes, audit.keep)));
            }
        }

        let mut agents = Agents::from_config(&config.agents, &config.tools, &workspace)?;
        agents.add_slot(skills.slot());
        if let Some(memory) = &memory {
            agents.add_slot(memory.slot());
        }
        for slot in self.slots {
            agents.add_slot(slot);
        }

        let mut cluster: Option<Arc<dyn flynn_sessions::Cluster>> = None;
        let store = match self.store {
            Some(store) => store,
            None => {
                let unset = config.sessions.url.is_none() && config.sessions.database.is_none();
                if unset && self.home.is_none() {
                    return Err(Error::Config(
                        "no place for the session database: set sessions.url or sessions.database, or give FlynnBuilder::home"
                            .to_owned(),
                    ));
                }
                let home = self.home.clone().unwrap_or_default();
                match flynn_sessions::location(&config.sessions, &home)? {
                    // Several processes may share it: this one joins them
                    // as a node, and runs only the sessions it holds.
                    flynn_sessions::StoreLocation::Postgres(url) => {
                        let store = flynn_sessions::PgStore::open(&url).await?;
                        let kind = match self.processes {
                            ProcessLifetime::Runtime => flynn_sessions::NodeKind::Daemon,
                            ProcessLifetime::Command => flynn_sessions::NodeKind::Command,
                        };
                        let node: Arc<dyn flynn_sessions::Cluster> =
                            Arc::new(store.join_cluster(kind).await?);
                        if let Err(error) =
                            flynn_orchestrator::forget_stopped_local_nodes(&*node).await
                        {
                            tracing::warn!(%error, "cannot look for stopped nodes of this machine; their sessions are taken over once they time out");
                        }
                        cluster = Some(node);
                        Arc::new(store)
                    }
                    flynn_sessions::StoreLocation::Sqlite(_) => {
                        flynn_sessions::open(&config.sessions, &home).await?
                    }
                }
            }
        };

        let manager = SessionManager::new(RuntimeParts {
            prices: PriceTable::new(&config.providers, &config.models.prices),
            max_tokens: config.models.max_tokens,
            router: Arc::new(router),
            store,
            executor,
            agents,
            sessions: config.sessions.clone(),
            delegation: DelegationSettings::from_config(&config),
            compaction: config.compaction.clone(),
            memory_flush: self.memory_flush,
            memory: memory.clone(),
            cluster,
        });
        manager.set_voice_default(config.voice.reply);
        automation.bind(manager.clone()).await?;
        // `start: boot` servers start now, in the background; the first
        // turn that may use one waits for it (`startup_timeout_secs`).
        mcp.start_boot();
        Ok(Flynn {
            manager,
            memory: memory.map(|m| m.memory),
            automation,
            mcp,
            processes,
            speech,
            transcriber,
            google,
        })
    }
}

/// A ready Flynn runtime. Its session lanes are tasks on the tokio runtime
/// it was built on; [`shutdown`](Flynn::shutdown) stops them.
#[derive(Debug, Clone)]
pub struct Flynn {
    manager: SessionManager,
    memory: Option<Memory>,
    automation: Automation,
    mcp: McpServers,
    processes: Arc<ProcessManager>,
    speech: Option<Arc<dyn flynn_voice::Synthesizer>>,
    transcriber: Option<Arc<dyn flynn_voice::Transcriber>>,
    google: Option<Arc<flynn_google::Google>>,
}

impl Flynn {
    /// The owner's Google accounts, when `google` is configured.
    pub fn google(&self) -> Option<&Arc<flynn_google::Google>> {
        self.google.as_ref()
    }

    /// The speech-to-text service `voice.stt` configures, if any.
    pub fn transcriber(&self) -> Option<&Arc<dyn flynn_voice::Transcriber>> {
        self.transcriber.as_ref()
    }

    /// The text-to-speech engine `voice.tts` configures, if any.
    pub fn speech(&self) -> Option<&Arc<dyn flynn_voice::Synthesizer>> {
        self.speech.as_ref()
    }

    pub fn builder() -> FlynnBuilder {
        FlynnBuilder::default()
    }

    /// The background processes (`process.start`) still running, of every
    /// session, oldest first.
    pub fn running_processes(&self) -> Vec<ProcessInfo> {
        self.processes.running()
    }

    /// Answers one message and returns how the turn ended; the turn's
    /// events (and reports about earlier turns of the session that were
    /// interrupted) go to `on_event` as they happen. Cancelling `cancel`
    /// cancels this turn, running or waiting. A chat command (`/status`)
    /// is answered without the model: its reply is the outcome's `reply`.
    pub async fn send(
        &self,
        request: TurnRequest,
        cancel: CancellationToken,
        on_event: &mut (dyn FnMut(AgentEvent) + Send),
    ) -> Result<TurnOutcome> {
        let mut turn = match self.manager.submit_and_follow(request).await? {
            Followed::Command { name, reply, .. } => {
                on_event(AgentEvent::Command {
                    name,
                    reply: reply.clone(),
                });
                return Ok(TurnOutcome::command_reply(reply));
            }
            Followed::Turn(turn) => turn,
        };
        let mut cancelled = false;
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    self.manager.cancel_turn(turn.session(), turn.turn()).await;
                }
                event = turn.next() => match event {
                    Some(Ok(envelope)) => on_event(envelope.event),
                    Some(Err(lagged)) => on_event(AgentEvent::Warning {
                        message: lagged.to_string(),
                    }),
                    None => break,
                },
            }
        }
        Ok(turn.outcome().await?)
    }

    /// Submits a message without waiting for its turn: see
    /// [`SessionManager::submit`].
    pub async fn submit(&self, request: TurnRequest) -> Result<Submitted> {
        Ok(self.manager.submit(request).await?)
    }

    /// Events of one session, from now on.
    pub fn subscribe(&self, session: &SessionKey) -> EventStream {
        self.manager.subscribe(session)
    }

    /// Events of every session, from now on.
    pub fn subscribe_all(&self) -> EventStream {
        self.manager.subscribe_all()
    }

    /// Cancels the session's running turn; see [`SessionManager::cancel`].
    pub fn cancel(&self, session: &SessionKey) -> bool {
        self.manager.cancel(session)
    }

    /// Reports or reruns turns a previous process left unfinished; a
    /// daemon calls this at start-up. See [`SessionManager::recover`].
    pub async fn recover(&self) -> Result<Vec<SessionKey>> {
        Ok(self.manager.recover().await?)
    }

    /// [`recover`](Self::recover), returning what was done with each turn
    /// (see [`SessionManager::recover_turns`]): the daemon hands them to
    /// the channel router, which tells the chats they came from.
    pub async fn recover_turns(&self) -> Result<Vec<flynn_orchestrator::RecoveredTurn>> {
        Ok(self.manager.recover_turns().await?)
    }

    /// Stops running cron jobs and the heartbeat (runs going on are
    /// cancelled), cancels running turns, waits for every lane to stop,
    /// then shuts the tools down (background processes are killed), and
    /// closes the session store last: a SQLite store checkpoints its
    /// write-ahead log then, so the next process to open it has no log to
    /// replay. The runtime takes no messages after this.
    pub async fn shutdown(&self) {
        self.automation.shutdown(std::time::Duration::ZERO).await;
        // The manager shuts the tools down after its lanes.
        self.manager.shutdown().await;
        flynn_sessions::Conversations::close(self.manager.store().as_ref()).await;
    }

    /// Cron jobs and the heartbeat: [`Automation::start`] runs them (the
    /// daemon does, after the runtime and the chat channels);
    /// [`Automation::jobs`] lists them.
    pub fn automation(&self) -> &Automation {
        &self.automation
    }

    /// The conversations.
    pub fn sessions(&self) -> &Arc<dyn SessionStore> {
        self.manager.store()
    }

    pub fn manager(&self) -> &SessionManager {
        &self.manager
    }

    /// The MCP servers of `mcp.servers` (enabled ones), their state and
    /// tools.
    pub fn mcp(&self) -> &McpServers {
        &self.mcp
    }

    /// The memory files and their index; `None` when `memory.enabled` is
    /// off or there is no place for them.
    pub fn memory(&self) -> Option<&Memory> {
        self.memory.as_ref()
    }
}

/// Memory files left on disk (`memory.dir`, else `<home>/memory`) that
/// `memory`, kept in PostgreSQL, does not read while it has no files of
/// its own (an installation moved to PostgreSQL): the directory, to say
/// how to move them in. `None` for memory on disk.
pub async fn unused_memory_files(
    config: &FlynnConfig,
    home: Option<&Path>,
    memory: &Memory,
) -> Option<std::path::PathBuf> {
    if !matches!(memory.location(), flynn_memory::Location::Database { .. }) {
        return None;
    }
    let dir = config
        .memory
        .dir
        .clone()
        .or_else(|| home.map(|h| h.join("memory")))?;
    let on_disk = flynn_memory::MemoryStore::new(&dir)
        .list()
        .await
        .unwrap_or_default();
    if on_disk.is_empty() || !memory.list().await.is_ok_and(|rows| rows.is_empty()) {
        return None;
    }
    Some(dir)
}

/// Opens the configured memory: with the sessions in PostgreSQL, in that
/// database (shared by every node); otherwise `memory.dir` (else
/// `<home>/memory`), indexed at `memory.index` (else
/// `<home>/memory-index.db`). Either with the configured embedder, and
/// opened on first use. `None` when memory is off, or when there is
/// neither a home nor a `memory.dir`.
pub async fn open_memory(config: &FlynnConfig, home: Option<&Path>) -> Result<Option<Memory>> {
    let settings = &config.memory;
    if !settings.enabled {
        return Ok(None);
    }
    let embedder = match &settings.embeddings {
        Some(embeddings) => Some(
            flynn_memory::embed::from_config(embeddings, &config.providers)
                .map_err(flynn_memory::Error::from)?,
        ),
        None => None,
    };
    if config.sessions.url.is_some() {
        let location = flynn_sessions::location(&config.sessions, Path::new(""))?;
        if let flynn_sessions::StoreLocation::Postgres(url) = &location {
            let memory = Memory::postgres(url, location.redacted(), embedder)?;
            if let Some(dir) = unused_memory_files(config, home, &memory).await {
                tracing::warn!(
                    dir = %dir.display(),
                    "the memory files in {} are not used: with the sessions in PostgreSQL, memory is kept there too; move them in with `flynn memory import {}`",
                    dir.display(),
                    dir.display()
                );
            }
            return Ok(Some(memory));
        }
    }
    let Some(dir) = settings
        .dir
        .clone()
        .or_else(|| home.map(|h| h.join("memory")))
    else {
        return Ok(None);
    };
    let index = match (&settings.index, home) {
        (Some(index), _) => index.clone(),
        (None, Some(home)) => home.join("memory-index.db"),
        (None, None) => dir.join(".index.db"),
    };
    Ok(Some(Memory::open_lazily(dir, &index, embedder)))
}
