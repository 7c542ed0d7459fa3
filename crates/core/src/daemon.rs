//! The daemon: Flynn's runtime behind the gateway, started in order and
//! stopped in reverse (`flynn-daemon`, `flynn start`).
//!
//! Start-up: check the bind address and the token policy, resolve the
//! token (the runtime keeps it out of tool output) and the workspace
//! (`FLYNN_HOME/workspace` unless `tools.workspace` names one), build the
//! runtime (opens the session store, memory lazily), report or rerun
//! turns a previous process left unfinished, bind, serve; cron jobs and the heartbeat start once the runtime and the chat
//! channels run. Shutdown runs the steps registered during start-up
//! last-first: automation stops scheduling and gives the runs going on
//! the grace period (`gateway.shutdown_grace_secs`); the gateway stops
//! taking messages and lets running turns finish (within what is left of
//! the same grace, then cancels them), closes its connections (5 s); the
//! channels stop (10 s, all at once); the runtime stops its lanes and
//! tools; memory flushes its index.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_channels::{Backoff, Registry};
use flynn_chat::ChannelRouter;
use flynn_gateway::{Control, Gateway, GatewayExtras, GatewayParts, RemoteApprover, TokenSource};
use flynn_protocol::config::FlynnConfig;

use crate::{Error, Flynn, Result};

/// What the daemon starts from.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub config: FlynnConfig,
    /// The file the config came from (`config.patch` edits it); `None`
    /// when it came from the environment.
    pub config_file: Option<PathBuf>,
    /// `FLYNN_HOME`: sessions, memory, the token file.
    pub home: PathBuf,
    /// `FLYNN_GATEWAY_TOKEN`, when set.
    pub env_token: Option<String>,
    /// Overrides `gateway.bind` (`--bind`).
    pub bind: Option<String>,
}

impl DaemonOptions {
    /// Options for a loaded config: its file, `FLYNN_HOME`, and the token
    /// in `FLYNN_GATEWAY_TOKEN` (read from the process environment).
    pub fn from_loaded(loaded: flynn_config::Loaded, bind: Option<String>) -> Self {
        let config_file = match loaded.source {
            flynn_config::Source::File(path) => Some(path),
            flynn_config::Source::Environment => None,
        };
        DaemonOptions {
            config: loaded.config,
            config_file,
            home: loaded.paths.home,
            env_token: std::env::var("FLYNN_GATEWAY_TOKEN").ok(),
            bind,
        }
    }
}

type Step = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Shutdown steps, run last-registered-first.
#[derive(Default)]
struct Stack {
    steps: Vec<(&'static str, Step)>,
}

impl Stack {
    fn push<F, Fut>(&mut self, name: &'static str, step: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.steps.push((name, Box::new(move || Box::pin(step()))));
    }

    async fn run(mut self) {
        while let Some((name, step)) = self.steps.pop() {
            let started = Instant::now();
            step().await;
            tracing::info!(
                step = name,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "stopped"
            );
        }
    }
}

/// A running daemon.
pub struct Daemon {
    /// Held until the daemon is dropped.
    _home_lock: crate::backup::DaemonLock,
    flynn: Flynn,
    addr: SocketAddr,
    token_source: TokenSource,
    control: Arc<Control>,
    stack: Stack,
    started: Instant,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("addr", &self.addr)
            .field("token_source", &self.token_source)
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Starts everything in order; serving when this returns.
    pub async fn start(options: DaemonOptions) -> Result<Daemon> {
        let started = Instant::now();
        raise_file_limit();
        let mut config = options.config;
        if let Some(bind) = options.bind {
            config.gateway.bind = bind;
        }
        let bind = config.gateway.bind.clone();
        let explicit_token = config
            .gateway
            .token
            .as_deref()
            .or(options.env_token.as_deref())
            .is_some_and(|t| !t.trim().is_empty());
        if let Some(token) = options.env_token.as_deref().map(str::trim)
            && config
                .gateway
                .token
                .as_deref()
                .is_none_or(|t| t.trim().is_empty())
            && !token.is_empty()
            && token.len() < flynn_gateway::MIN_TOKEN_LEN
        {
            return Err(Error::Config(format!(
                "FLYNN_GATEWAY_TOKEN is {} characters; expected at least {} (make one with `openssl rand -hex 32`)",
                token.len(),
                flynn_gateway::MIN_TOKEN_LEN
            )));
        }
        // Every named token readable, long enough, before anything starts.
        let named = flynn_gateway::resolve_named(&config.gateway).map_err(Error::Config)?;
        if !config.gateway.tailscale_users.is_empty() && config.gateway.tailscale.listen.is_none() {
            tracing::warn!(
                "gateway.tailscale_users is no longer honoured on gateway.bind (any local process or same-host proxy could send the header): set gateway.tailscale.listen (e.g. unix:/run/flynn/ts.sock), gateway.tailscale.host and gateway.tailscale.users, and point `tailscale serve` at that listener; until then Tailscale users need a token"
            );
        }
        if flynn_gateway::binds_beyond_loopback(&bind) && !explicit_token {
            return Err(Error::Config(format!(
                "gateway.bind is {bind}, beyond this machine, and no token is set: set gateway.token or FLYNN_GATEWAY_TOKEN to a long random secret (`openssl rand -hex 32`), or bind to 127.0.0.1"
            )));
        }
        let mut stack = Stack::default();
        // Private before anything is written into it.
        flynn_config::create_home(&options.home).map_err(|e| {
            Error::Serve(format!(
                "cannot create FLYNN_HOME {}: {e} (create it, or set FLYNN_HOME to a directory Flynn may write)",
                options.home.display()
            ))
        })?;

        // One daemon per home; `flynn restore` waits for none to hold it.
        let home_lock = crate::backup::DaemonLock::try_acquire(&options.home)?.ok_or_else(|| {
            Error::Serve(format!(
                "another flynn daemon is running on {} (it holds {}): stop it first, or set FLYNN_HOME to another directory",
                options.home.display(),
                options.home.join(crate::backup::DAEMON_LOCK).display()
            ))
        })?;
        check_database(&config, &options.home).await?;

        // The token first: tools must never show it, wherever it came from.
        let (token, token_source) = flynn_gateway::resolve_token(
            config.gateway.token.as_deref(),
            options.env_token.as_deref(),
            &options.home,
        )
        .map_err(|e| {
            Error::Serve(format!(
                "cannot create the gateway token in {}: {e}",
                options.home.display()
            ))
        })?;
        // The daemon never works in the directory it was started from:
        // without tools.workspace, FLYNN_HOME/workspace.
        let workspace = flynn_config::Workspace::resolve(
            config.tools.workspace.as_deref(),
            &options.home,
            None,
            &flynn_config::ProcessEnv,
        )
        .map_err(|e| Error::Config(e.to_string()))?;
        tracing::info!(workspace = %workspace.path.display(), "tools work in the workspace");
        config.tools.workspace = Some(workspace.path);

        // The runtime: session store, tools, agents, memory.
        let approver = RemoteApprover::new();
        let flynn = Flynn::builder()
            .config(config.clone())
            .home(&options.home)
            .secrets(std::iter::once(token.clone()).chain(named.iter().map(|t| t.token.clone())))
            .private_paths(options.config_file.clone())
            .build()
            .await?;
        let hidden = flynn_tools::sandbox::SandboxPaths::flynn(
            &options.home,
            options.config_file.as_deref(),
        );
        flynn_tools::sandbox::warn_if_unsandboxed(&config.tools, &hidden).await;
        if let Some(memory) = flynn.memory().cloned() {
            stack.push("memory", move || async move { memory.close().await });
        }
        let runtime = flynn.clone();
        stack.push("runtime", move || async move { runtime.shutdown().await });

        // Turns a previous process left unfinished.
        // Those of chats are told there once the channels are up.
        // Answers stored just before the last process died, read before
        // recovery finishes (and tells) the turns it left open.
        let cluster = flynn.manager().cluster().cloned();
        // In a cluster, only a daemon starting alone sends them: another
        // live node may be sending its own answers right now.
        let alone = match &cluster {
            Some(cluster) => match cluster.nodes().await {
                Ok(nodes) => !nodes
                    .iter()
                    .any(|n| n.alive && &n.id != cluster.node() && n.kind == "daemon"),
                Err(error) => {
                    tracing::warn!(%error, "cannot list the cluster's nodes");
                    false
                }
            },
            None => true,
        };
        let outbox = if alone {
            match flynn.manager().outbox().await {
                Ok(outbox) => outbox,
                Err(error) => {
                    tracing::error!(%error, "cannot read the answers the last run left unsent");
                    Vec::new()
                }
            }
        } else {
            tracing::info!(
                "other daemons run on this database: answers left unsent are theirs to send"
            );
            Vec::new()
        };
        let recovered = flynn.recover_turns().await?;
        if !recovered.is_empty() {
            tracing::warn!(
                turns = recovered.len(),
                "found turns a previous run left unfinished"
            );
        }

        // `sessions.retention_days`: now, then daily.
        if let Some(days) = config.sessions.retention_days {
            let store = flynn.manager().store().clone();
            let workspace = config.tools.workspace.clone().unwrap_or_default();
            let stop = tokio_util::sync::CancellationToken::new();
            let stopped = stop.clone();
            let pruning = tokio::spawn(async move {
                loop {
                    match crate::retention::prune(
                        store.as_ref(),
                        &workspace,
                        days,
                        std::time::SystemTime::now(),
                    )
                    .await
                    {
                        Ok(pruned) => tracing::info!(
                            sessions = pruned.sessions.len(),
                            inbox_files = pruned.inbox_files,
                            days,
                            "pruned what was idle longer than sessions.retention_days"
                        ),
                        Err(error) => tracing::error!(%error, "cannot prune old sessions"),
                    }
                    tokio::select! {
                        () = stopped.cancelled() => return,
                        () = tokio::time::sleep(crate::retention::PRUNE_EVERY) => {}
                    }
                }
            });
            stack.push("retention", move || async move {
                stop.cancel();
                let _ = pruning.await;
            });
        }

        // Chat channels: adapters under supervision, their deliveries
        // routed into sessions. Stopped after the gateway drained the
        // turns, so answers still being sent reach their chats.
        let channels = if config.channels.access().is_empty() {
            None
        } else {
            for (name, access) in config.channels.access() {
                if access.enabled && access.owners.is_empty() {
                    tracing::warn!(
                        channel = name,
                        "no owners named: every sender on {name} is a guest (own session and memory, the messaging tools, confirmations go to the dashboard); add your id to channels.{name}.owners or approve yourself with `flynn pairing approve {name} <code> --owner`"
                    );
                }
            }
            let (registry, deliveries) = Registry::new(Backoff::default());
            // In a cluster, one node at a time holds each channel's
            // connection; every node takes webhooks and sends answers.
            if let Some(cluster) = &cluster {
                registry.set_gate(Arc::new(crate::cluster::RoleGate::new(cluster.clone())));
            }
            let router =
                ChannelRouter::new(flynn.manager().clone(), registry.clone(), &config.channels);
            if let Some(transcriber) = flynn.transcriber() {
                tracing::info!(
                    transcriber = transcriber.id(),
                    "voice notes are transcribed before their turn"
                );
                router.set_transcriber(transcriber.clone());
            }
            match flynn.speech() {
                Some(speech) => {
                    tracing::info!(
                        speech = speech.id(),
                        reply = config.voice.reply.as_str(),
                        "answers can be spoken (voice.tts)"
                    );
                    router.set_speech(speech.clone(), config.voice.reply);
                }
                None if config.voice.reply != flynn_protocol::config::VoiceReply::Off => {
                    tracing::warn!(
                        reply = config.voice.reply.as_str(),
                        "voice.reply is set but voice.tts is not: answers stay text until voice.tts names a speech engine"
                    );
                }
                None => {}
            }
            let routing = router.spawn(deliveries);
            for (name, built) in crate::channels::build(&config.channels, &options.home) {
                match built {
                    crate::channels::Built::Adapter(adapter) => registry.start(adapter).await,
                    crate::channels::Built::Unavailable(reason) => {
                        registry.mark_unavailable(name, reason);
                    }
                }
            }
            let sent_at_start: std::collections::HashSet<flynn_protocol::TurnId> =
                outbox.iter().map(|u| u.turn).collect();
            router.follow_up(outbox, recovered);
            // In a cluster, sessions taken over from a node that died
            // are recovered later; their senders are told as they are.
            // And the answers a dead node stored but never sent are sent
            // by the node that runs the automation.
            if let Some(cluster) = &cluster {
                let mut later = flynn.manager().recovered_later();
                let telling = router.clone();
                tokio::spawn(async move {
                    while let Some(recovered) = later.recv().await {
                        telling.follow_up(Vec::new(), vec![recovered]);
                    }
                });
                let stop = tokio_util::sync::CancellationToken::new();
                let sending = tokio::spawn(crate::cluster::send_outbox_of_gone_nodes(
                    cluster.clone(),
                    flynn.manager().clone(),
                    router.clone(),
                    sent_at_start,
                    stop.clone(),
                ));
                stack.push("outbox of gone nodes", move || async move {
                    stop.cancel();
                    let _ = sending.await;
                });
            }
            let stopping = registry.clone();
            stack.push("channels", move || async move {
                stopping.shutdown().await;
                router.close(Duration::from_secs(5)).await;
                routing.abort();
            });
            Some(registry)
        };

        // Cron jobs and the heartbeat, after the runtime and the channels
        // their answers go out through. Stopped first (registered last).
        let automation = flynn.automation().clone();
        // In a cluster, on the one node holding its role.
        let automation_role = tokio_util::sync::CancellationToken::new();
        match &cluster {
            Some(cluster) => {
                tokio::spawn(crate::cluster::run_automation(
                    cluster.clone(),
                    automation.clone(),
                    channels.clone(),
                    automation_role.clone(),
                ));
            }
            None => automation
                .start(channels.clone())
                .await
                .map_err(|e| Error::Serve(format!("cannot start automation: {e}")))?,
        }

        let listener = tokio::net::TcpListener::bind(&bind).await.map_err(|e| {
            Error::Serve(format!(
                "cannot listen on {bind} (gateway.bind): {e}{}",
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    "; is another flynn-daemon running?"
                } else {
                    ""
                }
            ))
        })?;
        let grace = Duration::from_secs(config.gateway.shutdown_grace_secs);
        // `/mcp` serves the runtime's sessions and memory to other
        // agents; `mcp.status` reports the MCP servers it uses.
        let gateway = Gateway::with_extras(
            GatewayParts {
                manager: flynn.manager().clone(),
                config,
                config_file: options.config_file,
                token,
                approver,
                channels,
            },
            GatewayExtras {
                mcp: flynn.mcp().clone(),
                memory: flynn.memory().cloned(),
                transcriber: flynn.transcriber().cloned(),
            },
        );
        let control = gateway.control();
        let serving = gateway
            .serve(listener)
            .map_err(|e| Error::Serve(format!("cannot serve on {bind}: {e}")))?;
        let addr = serving.local_addr();
        let manager = flynn.manager().clone();
        // One grace period for the whole shutdown, not one per step: the
        // automation step starts it, the gateway's drain gets what is left,
        // so a stop stays within what a service manager waits
        // (deploy/flynn.service: grace plus the 5 s and 10 s steps below).
        let stopping_since: Arc<std::sync::OnceLock<Instant>> = Arc::default();
        let since = stopping_since.clone();
        stack.push("gateway", move || async move {
            let left = since
                .get()
                .map_or(grace, |at| grace.saturating_sub(at.elapsed()));
            // New messages are refused from here; clients keep their
            // connections and see their turns end.
            let left = manager.drain(left).await;
            if left > 0 {
                tracing::warn!(
                    turns = left,
                    "turns were cancelled or left waiting at the end of the grace period"
                );
            }
            serving.shutdown(Duration::from_secs(5)).await;
        });
        // First of all: no job starts any more, runs going on get the
        // grace period to finish and deliver, the rest are cancelled.
        stack.push("automation", move || async move {
            let _ = stopping_since.set(Instant::now());
            automation_role.cancel();
            automation.shutdown(grace).await;
        });
        tracing::info!(
            %addr,
            token = %token_source,
            ready_ms = started.elapsed().as_millis() as u64,
            "serving"
        );
        Ok(Daemon {
            _home_lock: home_lock,
            flynn,
            addr,
            token_source,
            control,
            stack,
            started,
        })
    }

    /// The address the gateway listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn token_source(&self) -> &TokenSource {
        &self.token_source
    }

    pub fn flynn(&self) -> &Flynn {
        &self.flynn
    }

    /// Time from [`start`](Self::start) being called until now.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Resolves when a client asked the daemon to restart.
    pub async fn restart_requested(&self) {
        self.control.stop_requested().cancelled().await;
    }

    /// Whether a client asked for a restart.
    pub fn restart_was_requested(&self) -> bool {
        self.control.restart_requested()
    }

    /// Stops everything, last started first.
    pub async fn shutdown(self) {
        self.stack.run().await;
    }
}

/// Raises the soft limit on open files to the hard one: the gateway caps
/// its connections (`gateway.max_connections`), and the rest of the daemon
/// (SQLite, providers, chat APIs) needs descriptors beyond those. A
/// systemd service starts at 1024.
#[cfg(unix)]
/// Refuses to start on a session database that fails `PRAGMA
/// quick_check`, naming the problems and the way out.
async fn check_database(config: &FlynnConfig, home: &std::path::Path) -> Result<()> {
    // A PostgreSQL server checks its own pages.
    let flynn_sessions::StoreLocation::Sqlite(path) =
        flynn_sessions::location(&config.sessions, home)?
    else {
        return Ok(());
    };
    if !path.exists() {
        return Ok(());
    }
    let store = flynn_sessions::SqliteStore::open(&path).await?;
    let checked = store.quick_check().await;
    store.close().await;
    let problems = checked?;
    if problems.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    let message = format!(
        "the session database {} failed its integrity check ({}{}): restore a backup with `flynn restore <archive>`, or save what is readable with `sqlite3 {} .recover | sqlite3 recovered.db` and put recovered.db in its place",
        path.display(),
        shown.join("; "),
        if problems.len() > shown.len() {
            "; ..."
        } else {
            ""
        },
        path.display()
    );
    tracing::error!("{message}");
    Err(Error::Backup(message))
}

fn raise_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some() && limit.current < limit.maximum.or(Some(u64::MAX)) {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::debug!(from = ?limit.current, to = ?limit.maximum, "raised the open-file limit")
            }
            Err(error) => tracing::debug!(%error, "cannot raise the open-file limit"),
        }
    }
}

#[cfg(not(unix))]
fn raise_file_limit() {}

/// The signals that stop the daemon: SIGTERM and SIGINT (Ctrl-C where
/// there are no Unix signals), listened for from the moment this is made.
/// Made before [`Daemon::start`]: the gateway answers as soon as it is
/// bound, on worker threads, and a SIGTERM that came before the signal
/// was listened for would kill the process instead of shutting it down.
#[derive(Debug)]
pub struct StopSignals {
    #[cfg(unix)]
    listening: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    /// Starts listening. Must be called inside the runtime.
    pub fn listen() -> StopSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listening = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            StopSignals { listening }
        }
        #[cfg(not(unix))]
        {
            StopSignals {}
        }
    }

    /// Waits for the next stop signal; returns its name.
    pub async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        if let Some((term, int)) = &mut self.listening {
            return tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
        }
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}
