//! Flynn's gateway: how clients drive a running daemon.
//!
//! One axum router on one port serves:
//! - `/rpc`: JSON-RPC 2.0 (jsonrpsee) over WebSocket and HTTP POST; the
//!   methods and their types are in `flynn-api` and `docs/protocol.md`;
//! - `/healthz` (no token), `/metrics` (Prometheus text);
//! - `/mcp`: Flynn as an MCP server (streamable HTTP) for other agents;
//! - `/v1/models` and `/v1/chat/completions` for OpenAI clients;
//! - `/webhooks/<name>`, signed with HMAC-SHA256 instead of the token.
//!
//! Every route but `/healthz` and the webhooks needs a bearer token
//! (`Authorization: Bearer`; `?token=` only on the WebSocket upgrade),
//! compared in constant time; each token has scopes, and every method and
//! route declares the scope it needs in one table ([`scope`]). Requests
//! from another site's page, for a host name the gateway does not answer
//! to, or over the connection caps are refused; slow clients are closed;
//! requests are limited in size and, per client, in rate; failed
//! authentications are throttled per address. A Tailscale identity counts
//! only on the listener `tailscale serve` targets, confirmed with
//! tailscaled.

mod approver;
mod audit;
mod auth;
mod channels;
pub mod convert;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod logs;
mod mcp;
mod metrics;
mod openai;
mod rpc;
pub mod scope;
mod server;
mod tailscale;
mod token;
mod ui;
mod webhooks;

pub use approver::{RemoteApprover, ResolveError, input_digest};
pub use auth::Client;
/// The protocol's types: the gateway serves them.
pub use flynn_api as api;
pub use flynn_api::{PROTOCOL_VERSION, codes, schema};
pub use logs::{LogLayer, log_layer};
pub use mcp::McpHost;
pub use metrics::rss_bytes;
pub use server::{Control, Gateway, GatewayExtras, GatewayParts, Serving};
pub use token::{
    ADMIN_TOKEN_NAME, MIN_TOKEN_LEN, NamedToken, TOKEN_FILE, TokenSource, generate_token,
    read_token_file, resolve_named, resolve_token,
};
pub use webhooks::{TIMESTAMP_WINDOW, sign, sign_timestamped, verify_signature};

/// Whether `bind` (`host:port`) listens beyond this machine.
pub fn binds_beyond_loopback(bind: &str) -> bool {
    let host = bind.rsplit_once(':').map_or(bind, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => !ip.is_loopback(),
        // A host name may resolve anywhere.
        Err(_) => true,
    }
}
