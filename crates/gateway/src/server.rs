//! The gateway: one axum router on one port, with the JSON-RPC service
//! (jsonrpsee, WebSocket and HTTP POST at `/rpc`) built per request inside
//! it, and the MCP service (rmcp's streamable HTTP at `/mcp`) beside it.

use flynn_channels::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use flynn_mcp::McpServers;
use flynn_memory::Memory;
use flynn_orchestrator::SessionManager;
use flynn_protocol::config::{FlynnConfig, GatewayConfig};
use jsonrpsee::server::{
    BatchRequestConfig, Methods, PingConfig, ServerConfig, ServerHandle, StopHandle,
    TowerServiceBuilder, stop_channel,
};
use tokio_util::sync::CancellationToken;
use tower::Service;
use tower::layer::util::Identity;

use crate::approver::RemoteApprover;
use crate::auth::{self, RateLimiter};
use crate::metrics::Metrics;

/// What a gateway serves.
pub struct GatewayParts {
    pub manager: SessionManager,
    /// The config the daemon runs with (for `config.get`, the model list
    /// and the gateway's own settings).
    pub config: FlynnConfig,
    /// The file `config.patch` edits; `None` when the config came from
    /// the environment (then `config.patch` is refused).
    pub config_file: Option<PathBuf>,
    /// The bearer token clients must present.
    pub token: String,
    /// Tool calls of gateway turns that wait for a person; pass the same
    /// one to anything else that starts turns for remote people.
    pub approver: RemoteApprover,
    /// The chat channels the daemon runs: their webhooks are served under
    /// `/channels/<name>/…`, their health in `channels.status`.
    pub channels: Option<Registry>,
}

/// What a gateway serves besides the sessions; the default is none of it.
#[derive(Debug, Clone, Default)]
pub struct GatewayExtras {
    /// The MCP servers the runtime uses as a client, reported by
    /// `mcp.status`.
    pub mcp: McpServers,
    /// Memory, for the `search_memory` tool of `/mcp`.
    pub memory: Option<Memory>,
}

impl std::fmt::Debug for GatewayParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayParts")
            .field("config_file", &self.config_file)
            .finish_non_exhaustive()
    }
}

/// What the gateway asks of the process that runs it.
#[derive(Debug, Default)]
pub struct Control {
    stop: CancellationToken,
    restart: AtomicBool,
}

impl Control {
    /// Fires when a client asked for a restart (`system.restart`).
    pub fn stop_requested(&self) -> &CancellationToken {
        &self.stop
    }

    /// Whether the stop was asked for as a restart.
    pub fn restart_requested(&self) -> bool {
        self.restart.load(Ordering::Acquire)
    }

    pub(crate) fn request_restart(&self) {
        self.restart.store(true, Ordering::Release);
        self.stop.cancel();
    }
}

/// What every handler shares.
pub(crate) struct State {
    pub manager: SessionManager,
    pub approver: RemoteApprover,
    pub config: FlynnConfig,
    pub config_file: Option<PathBuf>,
    pub settings: GatewayConfig,
    pub token_digest: [u8; 32],
    pub limiter: RateLimiter,
    pub metrics: Metrics,
    pub started: Instant,
    pub control: Arc<Control>,
    /// The last `providers.status` answer and when it was made.
    pub provider_checks: std::sync::Mutex<Option<(Instant, Vec<crate::api::ProviderStatus>)>>,
    pub channels: Option<Registry>,
    /// The MCP servers the runtime uses (`mcp.status`).
    pub mcp: McpServers,
    pub memory: Option<Memory>,
    /// Ends the MCP sessions of `/mcp` (their event streams would hold
    /// the graceful shutdown open).
    pub mcp_stop: CancellationToken,
}

/// A gateway ready to serve.
pub struct Gateway {
    state: Arc<State>,
    methods: Methods,
    rpc: TowerServiceBuilder<Identity, Identity>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("bind", &self.state.settings.bind)
            .finish_non_exhaustive()
    }
}

/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS: u32 = 1024;
/// Connections served at once.
const MAX_CONNECTIONS: u32 = 10_000;
/// Notifications buffered per connection before a slow client's turn
/// stream waits (the turn itself never does: it is told it lagged).
const MESSAGE_BUFFER: u32 = 1024;

impl Gateway {
    pub fn new(parts: GatewayParts) -> Gateway {
        Gateway::with_extras(parts, GatewayExtras::default())
    }

    /// A gateway that also reports the runtime's MCP servers
    /// (`mcp.status`) and searches its memory for `/mcp` callers.
    pub fn with_extras(parts: GatewayParts, extras: GatewayExtras) -> Gateway {
        let settings = parts.config.gateway.clone();
        // A guest's confirmations reach the owner here when the owner is
        // not in a chat to ask.
        parts
            .manager
            .set_owner_approver(Arc::new(parts.approver.clone()));
        let state = Arc::new(State {
            manager: parts.manager,
            approver: parts.approver,
            limiter: RateLimiter::new(settings.rate_limit_per_minute),
            token_digest: auth::digest(&parts.token),
            config: parts.config,
            config_file: parts.config_file,
            settings,
            metrics: Metrics::default(),
            started: Instant::now(),
            control: Arc::new(Control::default()),
            provider_checks: std::sync::Mutex::new(None),
            channels: parts.channels,
            mcp: extras.mcp,
            memory: extras.memory,
            mcp_stop: CancellationToken::new(),
        });
        let methods = crate::rpc::methods(state.clone());
        let limit = state.settings.max_request_bytes;
        let config = ServerConfig::builder()
            .max_request_body_size(limit)
            .max_response_body_size(64 * 1024 * 1024)
            .max_connections(MAX_CONNECTIONS)
            .max_subscriptions_per_connection(MAX_SUBSCRIPTIONS)
            .set_message_buffer_capacity(MESSAGE_BUFFER)
            .set_batch_request_config(BatchRequestConfig::Limit(50))
            .enable_ws_ping(PingConfig::new().ping_interval(Duration::from_secs(30)))
            .build();
        let rpc = jsonrpsee::server::Server::builder()
            .set_config(config)
            .to_service_builder();
        Gateway {
            state,
            methods: methods.into(),
            rpc,
        }
    }

    /// What the gateway asks of its process (restart).
    pub fn control(&self) -> Arc<Control> {
        self.state.control.clone()
    }

    /// The names of every JSON-RPC method (subscriptions included).
    pub fn method_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.methods.method_names().collect();
        names.sort_unstable();
        names
    }

    /// The routes, for serving on a listener of your own. Needs
    /// `into_make_service_with_connect_info::<SocketAddr>()`.
    pub fn router(&self, stop: StopHandle) -> Router {
        let state = self.state.clone();
        let methods = self.methods.clone();
        let rpc = self.rpc.clone();
        let rpc_route = any(move |request: Request| {
            let mut service = rpc.clone().build(methods.clone(), stop.clone());
            async move {
                match service.call(request).await {
                    Ok(response) => response.map(axum::body::Body::new).into_response(),
                    Err(error) => auth::refusal(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        &error.to_string(),
                    ),
                }
            }
        });
        let limit = usize::try_from(self.state.settings.max_request_bytes).unwrap_or(usize::MAX);
        let host = crate::mcp::McpHost::new(state.manager.clone(), state.memory.clone());
        let mut mcp = flynn_mcp::serve::http_service(Arc::new(host), state.mcp_stop.clone());
        mcp.config.max_request_body_bytes = limit;
        let protected = Router::new()
            .route("/rpc", rpc_route)
            .route_service("/mcp", mcp)
            .route("/metrics", get(crate::http::metrics))
            .route("/v1/models", get(crate::openai::models))
            .route(
                "/v1/chat/completions",
                post(crate::openai::chat_completions),
            )
            .route_layer(middleware::from_fn_with_state(
                state.clone(),
                auth::authorize,
            ));
        let mut router = Router::new();
        for path in crate::ui::paths() {
            router = router.route(path, get(crate::ui::serve));
        }
        router
            .route("/healthz", get(crate::http::healthz))
            .route("/webhooks/{name}", post(crate::webhooks::receive))
            .route("/channels/{name}/{*rest}", any(crate::channels::receive))
            .merge(protected)
            .fallback(crate::http::not_found)
            .layer(middleware::from_fn_with_state(
                state.clone(),
                count_requests,
            ))
            .layer(DefaultBodyLimit::max(limit))
            .with_state(state)
    }

    /// Serves on `listener` until [`Serving::shutdown`]. Events of the
    /// runtime are counted for `/metrics` from now on.
    pub fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<Serving> {
        let addr = listener.local_addr()?;
        let (stop, server_handle) = stop_channel();
        let router = self.router(stop);
        let state = self.state.clone();

        // Count the runtime's events for /metrics.
        let mut events = state.manager.subscribe_all();
        let counting = state.clone();
        let counter = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let Ok(envelope) = event {
                    counting.metrics.observe(&envelope);
                }
            }
        });

        let closing = CancellationToken::new();
        let close = closing.clone();
        let task = tokio::spawn(async move {
            // Events are many small writes: without TCP_NODELAY, Nagle's
            // algorithm and the client's delayed ACK hold each one back
            // for up to 40 ms.
            let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
                }
            });
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move { close.cancelled().await })
            .await
        });
        Ok(Serving {
            addr,
            closing,
            server_handle,
            task,
            counter,
            control: self.state.control.clone(),
            mcp_stop: self.state.mcp_stop.clone(),
        })
    }
}

/// Counts every HTTP request for `/metrics`.
async fn count_requests(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    request: Request,
    next: middleware::Next,
) -> Response {
    state.metrics.http_request();
    next.run(request).await
}

/// A gateway being served.
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    closing: CancellationToken,
    server_handle: ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    counter: tokio::task::JoinHandle<()>,
    control: Arc<Control>,
    mcp_stop: CancellationToken,
}

impl Serving {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// Stops accepting connections, closes the WebSocket connections and
    /// waits up to `grace` for requests in flight to finish.
    pub async fn shutdown(self, grace: Duration) {
        self.closing.cancel();
        self.mcp_stop.cancel();
        let _ = self.server_handle.stop();
        match tokio::time::timeout(grace, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "the gateway stopped with an error"),
            Ok(Err(error)) => tracing::warn!(%error, "the gateway task failed"),
            Err(_) => tracing::warn!("connections were still open at the end of the grace period"),
        }
        self.counter.abort();
    }
}
