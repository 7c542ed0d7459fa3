//! MCP servers used as tool sources.

use super::*;

/// MCP servers, in the shape other MCP clients use: `command`, `args` and
/// `env` for a server Flynn starts (stdio), `url` and `headers` for one it
/// reaches over streamable HTTP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// By name; a server's tools are offered as `<name>.<tool>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl McpConfig {
    /// The env values, header values and bearer tokens of every server:
    /// credentials, kept out of logs and tool output.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets = Vec::new();
        for server in self.servers.values() {
            secrets.extend(server.env.values().filter(|v| v.len() >= 8).cloned());
            secrets.extend(server.headers.values().filter(|v| v.len() >= 8).cloned());
            secrets.extend(server.bearer_token.clone());
        }
        secrets
    }
}

/// One MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// `stdio` or `http` (`streamable-http`); read from `command` or `url`
    /// when absent.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<McpTransport>,
    /// The program to start (stdio): `npx`, `uvx`, a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables for it. It gets only these and the basic
    /// ones (`PATH`, `HOME`, `LANG`...), never Flynn's own secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Directory it starts in; the workspace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The server's streamable HTTP endpoint (HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every request (HTTP), `Authorization` included.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A token sent as `Authorization: Bearer <token>` (HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<String>,
    /// Off: the server is neither started nor offered.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `boot`: started with Flynn; `lazy`: started before the first turn
    /// of an agent that may use its tools.
    #[serde(default)]
    pub start: McpStart,
    /// How long starting and listing the tools may take.
    #[serde(default = "default_mcp_startup_secs")]
    pub startup_timeout_secs: u64,
    /// How long one tool call may run.
    #[serde(default = "default_mcp_timeout_secs")]
    pub timeout_secs: u64,
    /// How often a running server is pinged; one that does not answer
    /// within as long is taken for hung and restarted. 0: never pinged.
    #[serde(default = "default_mcp_ping_interval_secs")]
    pub ping_interval_secs: u64,
    /// Trust what this server says: its tools' `readOnlyHint` and
    /// `openWorldHint` are honoured and its output does not taint the
    /// session. Off by default: every tool counts as acting on the world
    /// and its output as untrusted content.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
}

impl McpServerConfig {
    /// The transport: `type` when set, else stdio with a `command`, HTTP
    /// with a `url`.
    pub fn transport(&self) -> McpTransport {
        self.kind
            .unwrap_or(if self.url.is_some() && self.command.is_none() {
                McpTransport::Http
            } else {
                McpTransport::Stdio
            })
    }
}

impl McpServerConfig {
    /// What it runs or reaches, for people: `command args...` (arguments
    /// with spaces quoted) or the URL; never `env` or headers, which may
    /// hold secrets.
    pub fn target(&self) -> String {
        match self.transport() {
            McpTransport::Stdio => {
                let mut words = vec![self.command.clone().unwrap_or_default()];
                words.extend(self.args.iter().map(|arg| {
                    if arg.is_empty() || arg.contains(char::is_whitespace) {
                        format!("'{arg}'")
                    } else {
                        arg.clone()
                    }
                }));
                words.join(" ")
            }
            McpTransport::Http | McpTransport::Sse => self.url.clone().unwrap_or_default(),
        }
    }
}

impl McpTransport {
    /// As the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            McpTransport::Stdio => "stdio",
            McpTransport::Http => "http",
            McpTransport::Sse => "sse",
        }
    }
}

impl McpStart {
    /// As the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            McpStart::Boot => "boot",
            McpStart::Lazy => "lazy",
        }
    }
}

/// How Flynn talks to an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio,
    /// Streamable HTTP.
    #[serde(
        alias = "streamable-http",
        alias = "streamable_http",
        alias = "streamableHttp"
    )]
    Http,
    /// The older HTTP+SSE transport, which Flynn does not speak: refused
    /// with a pointer to streamable HTTP.
    Sse,
}

/// When an MCP server is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpStart {
    /// With Flynn, in the background.
    #[default]
    Boot,
    /// Before the first turn of an agent whose tools include it.
    Lazy,
}

fn default_mcp_startup_secs() -> u64 {
    30
}

fn default_mcp_timeout_secs() -> u64 {
    60
}

fn default_mcp_ping_interval_secs() -> u64 {
    30
}
