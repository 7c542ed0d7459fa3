//! The gateway: listeners, tokens and scopes, Tailscale, limits and webhooks.

use super::*;

/// The daemon's gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address to listen on. Anything beyond loopback needs a token.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// Bearer token clients must present; else `FLYNN_GATEWAY_TOKEN`, else
    /// one generated into `FLYNN_HOME/gateway.token` (mode 0600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Origins (`https://host[:port]`) whose pages may open the WebSocket,
    /// besides the gateway's own address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// Largest HTTP request body or WebSocket message, in bytes.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: u32,
    /// Requests (RPC calls, HTTP requests) one client may make per minute;
    /// 0 turns the limit off.
    #[serde(default = "default_rate_limit")]
    pub rate_limit_per_minute: u32,
    /// Deprecated: logins for `gateway.tailscale.users`. Identity headers
    /// are honoured only on `gateway.tailscale.listen` now; these logins
    /// are added to `gateway.tailscale.users`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tailscale_users: Vec<String>,
    /// Tailscale Serve in front of the gateway: who may come in without a
    /// token, on which listener, under which name.
    #[serde(default, skip_serializing_if = "TailscaleConfig::is_off")]
    pub tailscale: TailscaleConfig,
    /// Further tokens, each with its own name and rights (the token of
    /// `gateway.token`, `FLYNN_GATEWAY_TOKEN` or `FLYNN_HOME/gateway.token`
    /// is `admin`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<GatewayToken>,
    /// `Host` names requests may carry besides the bind address, the
    /// loopback names and the Tailscale name (anything else is refused:
    /// DNS rebinding). A reverse proxy's public name goes here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Connections served at once, over every client.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Connections one address may hold at once.
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: u32,
    /// Seconds a client has to send a request's headers (slow clients are
    /// closed).
    #[serde(default = "default_header_timeout")]
    pub header_timeout_secs: u64,
    /// Seconds a client has to send the body of a request that needs no
    /// token (`/webhooks/*`, `/channels/*`).
    #[serde(default = "default_body_timeout")]
    pub body_timeout_secs: u64,
    /// Failed authentications one address may make per minute before it
    /// is refused (429) until the minute is over.
    #[serde(default = "default_auth_failures")]
    pub auth_failures_per_minute: u32,
    /// Seconds a shutdown lets running turns finish before cancelling them.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_secs: u64,
    /// Signed inbound webhooks, by name: `POST /webhooks/<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub webhooks: BTreeMap<String, WebhookConfig>,
}

/// What a gateway token may do. `admin` implies the others.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Send messages and read the sessions it created; `/v1/*` and `/mcp`.
    Chat,
    /// Read every session, usage, logs and status.
    Read,
    /// Answer confirmations and pairing requests.
    Approve,
    /// Everything: config, `tools.invoke`, restart.
    Admin,
}

impl TokenScope {
    pub const ALL: [TokenScope; 4] = [
        TokenScope::Chat,
        TokenScope::Read,
        TokenScope::Approve,
        TokenScope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Chat => "chat",
            TokenScope::Read => "read",
            TokenScope::Approve => "approve",
            TokenScope::Admin => "admin",
        }
    }
}

impl std::fmt::Display for TokenScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named gateway token (`gateway.tokens`): its value in the config
/// or in a file, and what it may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayToken {
    /// Shown in logs and the audit log; letters, digits, `-`, `_`.
    pub name: String,
    /// The secret (at least 32 characters), or use `token_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the secret (mode 0600), read at start-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// `chat`, `read`, `approve`, `admin`.
    pub scopes: Vec<TokenScope>,
}

/// Tailscale Serve in front of the gateway (`gateway.tailscale`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TailscaleConfig {
    /// Tailnet logins let in without a token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// The listener `tailscale serve` targets, and only it:
    /// `unix:/run/flynn/ts.sock` (best: mode 0600) or a loopback
    /// `host:port`. Identity headers count only there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The gateway's Tailscale name (`box.tailnet.ts.net`): requests on the
    /// Tailscale listener must be for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// tailscaled's LocalAPI socket, asked who each client is.
    #[serde(default = "default_tailscaled_socket")]
    pub socket: PathBuf,
    /// What Tailscale users may do (default `admin`).
    #[serde(default = "default_tailscale_scopes")]
    pub scopes: Vec<TokenScope>,
}

impl Default for TailscaleConfig {
    fn default() -> Self {
        TailscaleConfig {
            users: Vec::new(),
            listen: None,
            host: None,
            socket: default_tailscaled_socket(),
            scopes: default_tailscale_scopes(),
        }
    }
}

impl TailscaleConfig {
    /// Nothing set: no Tailscale listener.
    pub fn is_off(&self) -> bool {
        *self == TailscaleConfig::default()
    }
}

fn default_tailscaled_socket() -> PathBuf {
    PathBuf::from("/var/run/tailscale/tailscaled.sock")
}

fn default_tailscale_scopes() -> Vec<TokenScope> {
    vec![TokenScope::Admin]
}

fn default_max_connections() -> u32 {
    1024
}

fn default_max_connections_per_ip() -> u32 {
    128
}

fn default_header_timeout() -> u64 {
    10
}

fn default_body_timeout() -> u64 {
    30
}

fn default_auth_failures() -> u32 {
    20
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            bind: default_bind(),
            token: None,
            allowed_origins: Vec::new(),
            max_request_bytes: default_max_request_bytes(),
            rate_limit_per_minute: default_rate_limit(),
            tailscale_users: Vec::new(),
            tailscale: TailscaleConfig::default(),
            tokens: Vec::new(),
            allowed_hosts: Vec::new(),
            max_connections: default_max_connections(),
            max_connections_per_ip: default_max_connections_per_ip(),
            header_timeout_secs: default_header_timeout(),
            body_timeout_secs: default_body_timeout(),
            auth_failures_per_minute: default_auth_failures(),
            shutdown_grace_secs: default_shutdown_grace(),
            webhooks: BTreeMap::new(),
        }
    }
}

/// One inbound webhook: a request signed with `secret` becomes a message
/// to an agent. The signature is HMAC-SHA256, hex: over
/// `<timestamp>.<body>` with `X-Flynn-Timestamp` (Unix seconds, within 5
/// minutes) in `X-Flynn-Signature: sha256=<hex>`; or over the body alone
/// (`X-Hub-Signature-256`, GitHub's form) with a delivery id never seen
/// before (`X-GitHub-Delivery` or `X-Flynn-Delivery`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Shared secret the sender signs with: at least 32 bytes
    /// (`openssl rand -hex 32`).
    pub secret: String,
    /// Session the message goes to (default `webhook:<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Agent that answers (default: the session's routed agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The message, with `{{body}}` replaced by the request body and
    /// `{{name}}` by the webhook's name (default: the body as is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Where the answer is sent, as a session key `<channel>:<peer>` on a
    /// configured chat channel (`telegram:123456789`); kept in the
    /// webhook's session only when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<String>,
}

fn default_bind() -> String {
    "127.0.0.1:18800".to_owned()
}

fn default_max_request_bytes() -> u32 {
    1024 * 1024
}

fn default_rate_limit() -> u32 {
    600
}

fn default_shutdown_grace() -> u64 {
    30
}
