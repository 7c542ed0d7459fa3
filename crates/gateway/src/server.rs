//! The gateway: one axum router on one port, with the JSON-RPC service
//! (jsonrpsee, WebSocket and HTTP POST at `/rpc`) built per request inside
//! it, and the MCP service (rmcp's streamable HTTP at `/mcp`) beside it.

use flynn_channels::Registry;
use std::collections::HashMap;
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
use hyper_util::rt::{TokioIo, TokioTimer};
use jsonrpsee::server::{
    BatchRequestConfig, Methods, PingConfig, ServerConfig, ServerHandle, StopHandle,
    TowerServiceBuilder, stop_channel,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;
use tower::layer::util::Identity;

use crate::approver::RemoteApprover;
use crate::auth::{self, Accepted, Conn, RateLimiter, Via};
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
    /// Speech to text (`voice.stt`), for the web chat's microphone
    /// (`POST /transcribe`).
    pub transcriber: Option<Arc<dyn flynn_voice::Transcriber>>,
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
    /// Every token accepted: the admin token (`default`) first, then
    /// `gateway.tokens`.
    pub tokens: Vec<Accepted>,
    pub limiter: RateLimiter,
    /// Failed authentications per address.
    pub failures: RateLimiter,
    /// tailscaled's LocalAPI, with a Tailscale listener.
    pub localapi: Option<crate::tailscale::LocalApi>,
    /// Webhook signatures and delivery ids seen (replays are refused).
    pub deliveries: crate::webhooks::Seen,
    pub metrics: Metrics,
    pub started: Instant,
    pub control: Arc<Control>,
    /// The last `providers.status` answer and when it was made.
    pub provider_checks: std::sync::Mutex<Option<(Instant, Vec<crate::api::ProviderStatus>)>>,
    pub channels: Option<Registry>,
    /// The MCP servers the runtime uses (`mcp.status`).
    pub mcp: McpServers,
    pub memory: Option<Memory>,
    /// Speech to text for `POST /transcribe`.
    pub transcriber: Option<Arc<dyn flynn_voice::Transcriber>>,
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
        // A guest's confirmations reach the owner here when the owner is
        // not in a chat to ask.
        parts
            .manager
            .set_owner_approver(Arc::new(parts.approver.clone()));
        let mut settings = parts.config.gateway.clone();
        // The old form's logins join the new one's.
        let old = std::mem::take(&mut settings.tailscale_users);
        for login in old {
            if !settings.tailscale.users.contains(&login) {
                settings.tailscale.users.push(login);
            }
        }
        let mut tokens = vec![Accepted {
            name: crate::token::ADMIN_TOKEN_NAME.to_owned(),
            digest: auth::digest(&parts.token),
            scopes: vec![flynn_protocol::config::TokenScope::Admin],
        }];
        match crate::token::resolve_named(&settings) {
            Ok(named) => tokens.extend(named.into_iter().map(|t| Accepted {
                digest: auth::digest(&t.token),
                name: t.name,
                scopes: t.scopes,
            })),
            Err(error) => tracing::error!(%error, "gateway.tokens: some tokens are not accepted"),
        }
        let localapi = settings
            .tailscale
            .listen
            .as_ref()
            .map(|_| crate::tailscale::LocalApi::new(settings.tailscale.socket.clone()));
        let state = Arc::new(State {
            manager: parts.manager,
            approver: parts.approver,
            limiter: RateLimiter::new(settings.rate_limit_per_minute),
            failures: RateLimiter::new(settings.auth_failures_per_minute),
            tokens,
            localapi,
            deliveries: crate::webhooks::Seen::default(),
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
            transcriber: extras.transcriber,
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
    /// `into_make_service_with_connect_info::<SocketAddr>()`; such a
    /// listener is the main one (no Tailscale identity), without the
    /// connection caps and header deadline of [`Gateway::serve`].
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
        let mcp = crate::mcp::Endpoint::new(state.clone(), limit);
        let protected = Router::new()
            .route("/rpc", rpc_route)
            .route(
                "/mcp",
                any(move |request: Request| {
                    let mcp = mcp.clone();
                    async move { mcp.serve(request).await }
                }),
            )
            .route("/metrics", get(crate::http::metrics))
            .route("/media/{id}", get(crate::http::media))
            .route("/transcribe", post(crate::http::transcribe))
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
            .route("/webhooks/{name}", any(crate::webhooks::receive))
            .route("/channels/{name}/{*rest}", any(crate::channels::receive))
            .merge(protected)
            .fallback(crate::http::not_found)
            .layer(middleware::from_fn_with_state(
                state.clone(),
                auth::check_host,
            ))
            .layer(middleware::from_fn(record_connection))
            .layer(middleware::from_fn_with_state(
                state.clone(),
                count_requests,
            ))
            .layer(DefaultBodyLimit::max(limit))
            .layer(middleware::from_fn(catch_panic))
            .with_state(state)
    }

    /// Serves on `listener` (and on `gateway.tailscale.listen` when set)
    /// until [`Serving::shutdown`]. Events of the runtime are counted for
    /// `/metrics` from now on.
    pub fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<Serving> {
        let addr = listener.local_addr()?;
        let tailscale = match &self.state.settings.tailscale.listen {
            Some(listen) => Some(bind_tailscale(listen)?),
            None => None,
        };
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
        let settings = &self.state.settings;
        let serve = Arc::new(Connections {
            router,
            closing: closing.clone(),
            tracker: TaskTracker::new(),
            slots: Arc::new(Semaphore::new(
                usize::try_from(settings.max_connections).unwrap_or(usize::MAX),
            )),
            per_ip: Arc::new(PerIp {
                max: settings.max_connections_per_ip,
                open: std::sync::Mutex::new(HashMap::new()),
            }),
            header_timeout: Duration::from_secs(settings.header_timeout_secs.max(1)),
            state: state.clone(),
        });
        let main = tokio::spawn(serve.clone().accept(Incoming::Tcp(listener), Via::Main));
        let side =
            tailscale.map(|listener| tokio::spawn(serve.clone().accept(listener, Via::Tailscale)));
        let task = tokio::spawn(async move {
            let _ = main.await;
            if let Some(side) = side {
                let _ = side.await;
            }
            serve.tracker.close();
            serve.tracker.wait().await;
            Ok(())
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

/// A listener of the gateway's.
enum Incoming {
    Tcp(tokio::net::TcpListener),
    #[cfg(unix)]
    Unix(tokio::net::UnixListener, PathBuf),
}

/// Binds `gateway.tailscale.listen`: `unix:/path` (mode 0600, a stale
/// socket replaced) or a loopback `host:port`.
fn bind_tailscale(listen: &str) -> std::io::Result<Incoming> {
    if let Some(path) = listen.strip_prefix("unix:") {
        #[cfg(unix)]
        {
            use std::os::unix::fs::{FileTypeExt, PermissionsExt};
            let path = PathBuf::from(path);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
                std::fs::remove_file(&path)?;
            }
            let listener = tokio::net::UnixListener::bind(&path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            return Ok(Incoming::Unix(listener, path));
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            return Err(std::io::Error::other("unix: listeners need a Unix system"));
        }
    }
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    Ok(Incoming::Tcp(tokio::net::TcpListener::from_std(listener)?))
}

/// Open connections per address, capped.
struct PerIp {
    max: u32,
    open: std::sync::Mutex<HashMap<std::net::IpAddr, u32>>,
}

/// One connection counted against its address; uncounted on drop.
struct IpSlot {
    per_ip: Arc<PerIp>,
    ip: std::net::IpAddr,
}

impl PerIp {
    fn enter(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<IpSlot> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            per_ip: self.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self
            .per_ip
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What serving connections shares.
struct Connections {
    router: Router,
    closing: CancellationToken,
    tracker: TaskTracker,
    slots: Arc<Semaphore>,
    per_ip: Arc<PerIp>,
    header_timeout: Duration,
    state: Arc<State>,
}

impl Connections {
    /// Accepts connections until closing: each within the caps is served
    /// in a task of its own; one over a cap is closed at once.
    async fn accept(self: Arc<Self>, listener: Incoming, via: Via) {
        loop {
            let accepted = tokio::select! {
                () = self.closing.cancelled() => break,
                accepted = accept_one(&listener) => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, most likely: wait a little
                    // for connections to close rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::select! {
                        () = self.closing.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    }
                }
            };
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                self.state.metrics.connection_refused();
                tracing::debug!(%peer, "refused a connection: gateway.max_connections reached");
                continue;
            };
            // Behind `tailscale serve` every connection is tailscaled's:
            // only the global cap applies.
            let ip_slot = match (via, peer) {
                (Via::Tailscale, _) => None,
                (Via::Main, peer) => match self.per_ip.enter(peer.ip()) {
                    Some(ip_slot) => Some(ip_slot),
                    None => {
                        self.state.metrics.connection_refused();
                        tracing::debug!(%peer, "refused a connection: gateway.max_connections_per_ip reached");
                        continue;
                    }
                },
            };
            let conn = Conn { peer, via };
            let this = self.clone();
            self.tracker.spawn(async move {
                let _slots = (slot, ip_slot);
                match stream {
                    Stream::Tcp(stream) => this.serve_one(stream, conn).await,
                    #[cfg(unix)]
                    Stream::Unix(stream) => this.serve_one(stream, conn).await,
                }
            });
        }
        #[cfg(unix)]
        if let Incoming::Unix(_, path) = &listener {
            let _ = std::fs::remove_file(path);
        }
    }

    async fn serve_one<S>(&self, stream: S, conn: Conn)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(conn);
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(conn.peer));
                let mut router = router.clone();
                async move { router.call(request.map(axum::body::Body::new)).await }
            },
        );
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .keep_alive(true);
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        tokio::pin!(connection);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, peer = %conn.peer, "a connection ended with an error");
                }
            }
            () = self.closing.cancelled() => {
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
            }
        }
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

async fn accept_one(listener: &Incoming) -> std::io::Result<(Stream, SocketAddr)> {
    match listener {
        Incoming::Tcp(listener) => {
            let (stream, peer) = listener.accept().await?;
            // Events are many small writes: without TCP_NODELAY, Nagle's
            // algorithm and the client's delayed ACK hold each one back
            // for up to 40 ms.
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
            }
            Ok((Stream::Tcp(stream), peer))
        }
        #[cfg(unix)]
        Incoming::Unix(listener, _) => {
            let (stream, _) = listener.accept().await?;
            // Only tailscaled connects here; the client's address comes
            // from the headers it sets.
            let peer = SocketAddr::from(([127, 0, 0, 1], 0));
            Ok((Stream::Unix(stream), peer))
        }
    }
}

/// Records the connection of a request served by a listener of someone
/// else's (`Gateway::router` under `axum::serve`) as the main listener.
/// A handler that panics (a bug) answers 500 and is logged with its
/// request; the connection, its neighbours and the daemon carry on.
async fn catch_panic(request: Request, next: middleware::Next) -> Response {
    use futures::FutureExt;
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(panic) => {
            let message = flynn_protocol::fault::panic_message(panic.as_ref());
            tracing::error!(%method, path, panic = message, "a request handler panicked; answered 500");
            auth::refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the gateway failed on this request (a bug; it is logged); try again",
            )
        }
    }
}

async fn record_connection(mut request: Request, next: middleware::Next) -> Response {
    if request.extensions().get::<Conn>().is_none()
        && let Some(axum::extract::ConnectInfo(peer)) = request
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .copied()
    {
        request.extensions_mut().insert(Conn {
            peer,
            via: Via::Main,
        });
    }
    next.run(request).await
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
