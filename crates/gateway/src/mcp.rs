//! Flynn as an MCP server over a running session manager: the host the
//! gateway's `/mcp` serves (and `flynn mcp serve` over stdio), and the
//! state of the MCP servers Flynn uses itself (`mcp.status`).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use flynn_mcp::McpServers;
use flynn_mcp::serve::{
    AgentSummary, FlynnHost, HistoryEntry, HistoryPage, HostError, MemoryHit, Outgoing,
    SessionSummary,
};
use flynn_memory::{Memory, SearchOptions};
use flynn_orchestrator::{SessionManager, Submitted, TurnRequest};
use flynn_protocol::{SessionKey, TurnOutcome};
use flynn_tools::DenyAll;
use tokio_util::sync::CancellationToken;

use crate::api::McpServerStatus;
use crate::auth::Client;
use crate::server::State;
use flynn_protocol::config::TokenScope;

/// The gateway's `/mcp`: one MCP service per client (token name or
/// Tailscale login), so each sees only what its scopes allow and MCP
/// sessions are never shared between tokens.
#[derive(Clone)]
pub(crate) struct Endpoint {
    state: Arc<State>,
    limit: usize,
    hosts: Vec<String>,
    services: Arc<std::sync::Mutex<HashMap<String, Service>>>,
}

type Service = flynn_mcp::serve::StreamableHttpService<
    flynn_mcp::serve::FlynnServer,
    flynn_mcp::serve::LocalSessionManager,
>;

impl Endpoint {
    pub(crate) fn new(state: Arc<State>, limit: usize) -> Self {
        let settings = &state.settings;
        let bind = settings
            .bind
            .rsplit_once(':')
            .map_or(settings.bind.as_str(), |(h, _)| h);
        let bind = bind.trim_start_matches('[').trim_end_matches(']');
        let unspecified = bind
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        // Bound to every address, the gateway's own `Host` check (which
        // takes any IP literal) is the one that applies.
        let hosts = if unspecified {
            Vec::new()
        } else {
            ["localhost", "127.0.0.1", "::1", bind]
                .into_iter()
                .map(str::to_owned)
                .chain(settings.tailscale.host.clone())
                .chain(settings.allowed_hosts.iter().cloned())
                .collect()
        };
        Endpoint {
            state,
            limit,
            hosts,
            services: Arc::default(),
        }
    }

    pub(crate) async fn serve(&self, request: axum::extract::Request) -> axum::response::Response {
        use axum::response::IntoResponse;
        let Some(client) = request.extensions().get::<Client>().cloned() else {
            return axum::http::StatusCode::UNAUTHORIZED.into_response();
        };
        let mut service = {
            let mut services = self
                .services
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            services
                .entry(client.principal.clone())
                .or_insert_with(|| {
                    let host = McpHost::for_client(
                        self.state.manager.clone(),
                        self.state.memory.clone(),
                        &client,
                    );
                    let mut service = flynn_mcp::serve::http_service(
                        Arc::new(host),
                        self.state.mcp_stop.clone(),
                        self.hosts.clone(),
                    );
                    service.config.max_request_body_bytes = self.limit;
                    service
                })
                .clone()
        };
        match tower::Service::call(&mut service, request).await {
            Ok(response) => response.map(axum::body::Body::new),
            Err(never) => match never {},
        }
    }
}

/// What Flynn's MCP tools run on: the session manager, and memory when
/// it is on. Turns are unattended: tool calls that need a person's
/// confirmation are denied.
#[derive(Clone)]
pub struct McpHost {
    manager: SessionManager,
    memory: Option<Memory>,
    scope: Option<McpScope>,
}

/// What a client without `admin` may reach over MCP: the sessions of its
/// namespace (every session to read, with `read`).
#[derive(Debug, Clone)]
struct McpScope {
    namespace: String,
    read_all: bool,
    /// Who its turns act for (a guest of the namespace).
    principal: flynn_protocol::Principal,
}

impl McpScope {
    /// `session` inside the namespace: its channel replaced.
    fn confine(&self, session: SessionKey) -> SessionKey {
        if session.channel() == self.namespace {
            return session;
        }
        SessionKey::new(&self.namespace, session.peer()).unwrap_or(session)
    }
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("memory", &self.memory.is_some())
            .finish_non_exhaustive()
    }
}

impl McpHost {
    pub fn new(manager: SessionManager, memory: Option<Memory>) -> Self {
        McpHost {
            manager,
            memory,
            scope: None,
        }
    }

    /// The host a client of the gateway's `/mcp` gets: everything with
    /// `admin`, else its own sessions (the channel of every session it
    /// names becomes its namespace, `token-<name>`), all sessions to read
    /// with `read`, and memory search only with `read`.
    pub(crate) fn for_client(
        manager: SessionManager,
        memory: Option<Memory>,
        client: &Client,
    ) -> Self {
        let scope = (!client.is_admin()).then(|| McpScope {
            namespace: client.namespace.clone(),
            read_all: client.has(TokenScope::Read),
            principal: client.turn_principal(),
        });
        McpHost {
            manager,
            memory,
            scope,
        }
    }
}

/// How an error of the runtime reaches the MCP caller.
fn host_error(error: flynn_orchestrator::Error) -> HostError {
    use flynn_orchestrator::Error;
    match error {
        Error::Cancelled => HostError::Cancelled,
        Error::UnknownAgent { .. }
        | Error::QueueFull { .. }
        | Error::EmptyMessage
        | Error::ShuttingDown => HostError::Refused(error.to_string()),
        other => HostError::Failed(other.to_string()),
    }
}

fn storage(error: flynn_sessions::Error) -> HostError {
    HostError::Failed(format!("the session store failed: {error}"))
}

#[async_trait]
impl FlynnHost for McpHost {
    fn agents(&self) -> Vec<AgentSummary> {
        let agents = self.manager.agents();
        let default = agents.default_agent().name.clone();
        agents
            .names()
            .filter_map(|name| agents.get(name))
            .map(|profile| AgentSummary {
                name: profile.name.clone(),
                tier: profile.tier,
                model: profile.model.as_ref().map(ToString::to_string),
                default: profile.name == default,
            })
            .collect()
    }

    async fn send(
        &self,
        message: Outgoing,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, HostError> {
        let session = match &self.scope {
            Some(scope) => scope.confine(message.session),
            None => message.session,
        };
        let mut request = TurnRequest::text(session.clone(), message.message);
        request.agent = message.agent;
        if let Some(scope) = &self.scope {
            request.principal = scope.principal.clone();
        }
        request.approver = Some(Arc::new(DenyAll::new(
            "it needs a person's confirmation, and a message sent over MCP has nobody to ask",
        )));
        let handle = match self.manager.submit(request).await.map_err(host_error)? {
            Submitted::Command { reply, .. } => return Ok(TurnOutcome::command_reply(reply)),
            Submitted::Turn(handle) => handle,
        };
        let turn = handle.turn;
        let outcome = handle.outcome();
        tokio::pin!(outcome);
        tokio::select! {
            result = &mut outcome => result.map_err(host_error),
            () = cancel.cancelled() => {
                self.manager.cancel_turn(&session, turn).await;
                outcome.await.map_err(host_error)
            }
        }
    }

    async fn sessions(&self, limit: usize) -> Result<Vec<SessionSummary>, HostError> {
        let sessions = self.manager.store().list().await.map_err(storage)?;
        Ok(sessions
            .into_iter()
            .filter(|info| {
                self.scope
                    .as_ref()
                    .is_none_or(|scope| scope.read_all || info.key.channel() == scope.namespace)
            })
            .take(limit)
            .map(|info| SessionSummary {
                session: info.key.to_string(),
                messages: info.message_count,
                updated_at: info.updated_at,
                agent: info.meta.agent,
                title: info.meta.title,
            })
            .collect())
    }

    async fn history(
        &self,
        session: &SessionKey,
        limit: usize,
    ) -> Result<Option<HistoryPage>, HostError> {
        let confined;
        let session = match &self.scope {
            Some(scope) if !scope.read_all => {
                confined = scope.confine(session.clone());
                &confined
            }
            _ => session,
        };
        let store = self.manager.store();
        if store.info(session).await.map_err(storage)?.is_none() {
            return Ok(None);
        }
        // One more than asked tells whether older messages exist.
        let mut page = store
            .history_page(session, None, limit.saturating_add(1))
            .await
            .map_err(storage)?;
        let more_before = page.len() > limit;
        if more_before {
            page.remove(0);
        }
        Ok(Some(HistoryPage {
            messages: page
                .into_iter()
                .map(|stored| HistoryEntry {
                    seq: stored.seq,
                    created_at: stored.created_at,
                    message: stored.message,
                })
                .collect(),
            more_before,
        }))
    }

    async fn search_memory(&self, query: &str, limit: usize) -> Result<Vec<MemoryHit>, HostError> {
        if self.scope.as_ref().is_some_and(|scope| !scope.read_all) {
            return Err(HostError::Refused(
                "searching Flynn's memory needs a gateway token with the `read` scope".to_owned(),
            ));
        }
        let Some(memory) = &self.memory else {
            return Err(HostError::MemoryOff);
        };
        let options = SearchOptions {
            limit,
            ..SearchOptions::default()
        };
        let hits = memory
            .search(query, &options)
            .await
            .map_err(|error| HostError::Failed(format!("memory search failed: {error}")))?;
        Ok(hits
            .into_iter()
            .map(|hit| MemoryHit {
                file: hit.file,
                start_line: hit.start_line,
                end_line: hit.end_line,
                heading: hit.heading,
                text: hit.text,
                score: hit.score,
            })
            .collect())
    }
}

/// Each MCP server of `servers` as `mcp.status` reports it.
pub(crate) fn status(servers: &McpServers) -> Vec<McpServerStatus> {
    servers
        .iter()
        .map(|server| {
            let status = server.status();
            McpServerStatus {
                name: status.name,
                transport: status.transport.to_owned(),
                target: status.target,
                start: server.config().start,
                phase: status.phase.as_str().to_owned(),
                server: status.server,
                tools: status.tools,
                error: status.error,
                retry_in_secs: status.retry_in_secs,
                restarts: status.restarts,
            }
        })
        .collect()
}
