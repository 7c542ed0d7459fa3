//! Tools: profiles, policy, hooks, autonomy, taint, audit, the sandbox and each built-in tool's settings.

use super::*;

/// Tool sets named after what an agent is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolProfile {
    /// Memory only.
    Minimal,
    /// Memory, web, sessions and sub-agents: a chat assistant that runs nothing.
    Messaging,
    /// Files, shell, processes, web, memory, sessions and sub-agents.
    Coding,
    /// Every tool.
    #[default]
    Full,
}

/// Which tools an agent may use: a profile, narrowed by `enabled` and
/// `deny` globs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicyConfig {
    /// The starting set; the `tools` block's profile when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ToolProfile>,
    /// Only these tools (names or globs such as `file.*`) of the profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Vec<String>>,
    /// Never these tools (names or globs); wins over everything else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// How much this agent may do without asking; the `tools` block's
    /// autonomy when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autonomy: Option<Autonomy>,
    /// What this agent does once untrusted content is in its session; the
    /// `tools` block's `taint` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<TaintPolicy>,
}

pub(super) fn default_max_iterations() -> u32 {
    10
}

/// Built-in tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Tools offered to the model (names or globs such as `file.*`); every
    /// tool of the profile when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Vec<String>>,
    /// The starting set of tools: minimal, messaging, coding or full.
    #[serde(default)]
    pub profile: ToolProfile,
    /// How much the agent may do without asking: `read_only` (no tool that
    /// writes, runs or sends is offered), `supervised` (those ask first;
    /// reading is silent) or `full` (nothing asks; every call is logged).
    /// `hooks` override it tool by tool.
    #[serde(default)]
    pub autonomy: Autonomy,
    /// What happens once untrusted content (a web page, an MCP tool's
    /// output, a webhook body) is in a session: `ask` (reading what the
    /// turn did not bring in, and sending data out, need a person's
    /// answer; `--yes` does not give it) or `allow` (no extra asking).
    #[serde(default)]
    pub taint: TaintPolicy,
    /// Names of variables of Flynn's own environment that commands
    /// (`shell.exec`, `process.*`) also get, beside the basic ones (`PATH`,
    /// `HOME`, `LANG`...). Nothing else of Flynn's environment reaches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Tools never offered nor run (names or globs); wins over every other
    /// setting, agents' included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// What happens before a tool runs, by tool name glob; the first
    /// matching rule wins, and tools no rule matches run silently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRule>,
    /// Seconds a confirmation waits for an answer before it is denied.
    #[serde(default = "default_confirm_timeout")]
    pub confirm_timeout_secs: u64,
    /// Tool output longer than this many bytes is cut, with a marker.
    #[serde(default = "default_output_limit")]
    pub output_limit_bytes: usize,
    /// Tool output longer than this many bytes is condensed on the
    /// `agents.delegation.tool_summarisation` tier before the model sees
    /// it; the whole output stays readable with `tool.output`. Off when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarise_over_bytes: Option<usize>,
    /// Directory that relative paths and commands start in; the current
    /// directory when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Policy overrides by model provider (a `providers` key), applied
    /// after the agent's: a small local model can be offered fewer tools.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ToolPolicyConfig>,
    /// Tools (names or globs) not sent with every request; the model finds
    /// them with `tools.search` when it needs them. The built-in list of
    /// rarely needed tools when absent; `[]` sends every tool every time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Vec<String>>,
    /// The audit log: one JSON line per tool call, secrets redacted.
    #[serde(default)]
    pub audit: AuditConfig,
    /// Where shell and process tools run: an OS sandbox or none.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    #[serde(default)]
    pub shell: ShellToolConfig,
    #[serde(default)]
    pub files: FileToolConfig,
    #[serde(default)]
    pub web_fetch: WebFetchConfig,
    #[serde(default)]
    pub web_search: WebSearchConfig,
    #[serde(default)]
    pub process: ProcessToolConfig,
    #[serde(default)]
    pub browser: BrowserToolConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            enabled: None,
            profile: ToolProfile::default(),
            deny: Vec::new(),
            hooks: Vec::new(),
            autonomy: Autonomy::default(),
            taint: TaintPolicy::default(),
            env: Vec::new(),
            confirm_timeout_secs: default_confirm_timeout(),
            output_limit_bytes: default_output_limit(),
            summarise_over_bytes: None,
            workspace: None,
            providers: BTreeMap::new(),
            deferred: None,
            audit: AuditConfig::default(),
            sandbox: SandboxConfig::default(),
            shell: ShellToolConfig::default(),
            files: FileToolConfig::default(),
            web_fetch: WebFetchConfig::default(),
            web_search: WebSearchConfig::default(),
            process: ProcessToolConfig::default(),
            browser: BrowserToolConfig::default(),
        }
    }
}

fn default_confirm_timeout() -> u64 {
    120
}

/// One hook: what happens before a matching tool runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookRule {
    /// Tool name glob, e.g. `shell.*`.
    pub tool: String,
    pub action: HookAction,
}

/// What a hook does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookAction {
    /// Ask a person first (a TTY prompt, a chat button, `--yes`); no
    /// answer within `confirm_timeout_secs` denies the call.
    Confirm,
    /// Run, and log the call.
    Log,
    /// Run.
    Silent,
}

fn default_output_limit() -> usize {
    50 * 1024
}

/// `shell.exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellToolConfig {
    /// Seconds before a command is killed.
    #[serde(default = "default_shell_timeout")]
    pub timeout_secs: u64,
}

impl Default for ShellToolConfig {
    fn default() -> Self {
        ShellToolConfig {
            timeout_secs: default_shell_timeout(),
        }
    }
}

fn default_shell_timeout() -> u64 {
    30
}

/// `file.*` tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileToolConfig {
    /// Seconds before a file operation is abandoned.
    #[serde(default = "default_file_timeout")]
    pub timeout_secs: u64,
}

impl Default for FileToolConfig {
    fn default() -> Self {
        FileToolConfig {
            timeout_secs: default_file_timeout(),
        }
    }
}

fn default_file_timeout() -> u64 {
    10
}

/// How much an agent may do without asking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Autonomy {
    /// Only tools that read are offered.
    ReadOnly,
    /// Tools that write files, run processes or send messages ask first.
    #[default]
    Supervised,
    /// Nothing asks; every call is logged.
    Full,
}

/// What an agent does once untrusted content is in its session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaintPolicy {
    /// Reading what the turn did not bring in and sending data out ask a
    /// person (approve-all does not answer for one).
    #[default]
    Ask,
    /// Nothing more asks than the autonomy says.
    Allow,
}

/// `tools.audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Write the audit log at all.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Directory of `tools.jsonl` and its rotated files; `FLYNN_HOME/audit`
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// The file is rotated when it would grow past this many bytes.
    #[serde(default = "default_audit_max_bytes")]
    pub max_bytes: u64,
    /// Rotated files kept (`tools.1.jsonl` is the newest).
    #[serde(default = "default_audit_keep")]
    pub keep: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            enabled: true,
            dir: None,
            max_bytes: default_audit_max_bytes(),
            keep: default_audit_keep(),
        }
    }
}

fn default_audit_max_bytes() -> u64 {
    10 * 1024 * 1024
}

fn default_audit_keep() -> u32 {
    5
}

/// `tools.sandbox`: the OS sandbox of `shell.exec` and `process.start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `auto` picks the strongest available (bubblewrap, then Docker, then
    /// Landlock); naming one that is not available is an error when a
    /// command is run.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Let sandboxed commands reach the network.
    #[serde(default)]
    pub network: bool,
    /// More directories (besides the workspace) a sandboxed command may write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<PathBuf>,
    /// Host paths (directories, files or Unix sockets such as an
    /// ssh-agent's) a sandboxed command may read, beside the system
    /// directories; nothing of `$HOME`, `FLYNN_HOME` or `/run` otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readable: Vec<PathBuf>,
    /// Image the Docker sandbox runs commands in.
    #[serde(default = "default_docker_image")]
    pub docker_image: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: SandboxMode::default(),
            network: false,
            writable: Vec::new(),
            readable: Vec::new(),
            docker_image: default_docker_image(),
        }
    }
}

fn default_docker_image() -> String {
    "debian:stable-slim".to_owned()
}

/// Which sandbox runs shell and process tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// The strongest one this host has; none when it has none.
    #[default]
    Auto,
    /// bubblewrap (`bwrap`): own mount, PID and network namespaces.
    Bubblewrap,
    /// A Docker container per command.
    Docker,
    /// Landlock file-system rules applied to the command (no network
    /// isolation on kernels before ABI 4).
    Landlock,
    /// No sandbox: commands run as the daemon's user.
    None,
}

/// `tools.web_fetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchConfig {
    /// Seconds a fetch may take, redirects included.
    #[serde(default = "default_web_timeout")]
    pub timeout_secs: u64,
    /// Largest body read, in bytes; a longer one is cut and says so.
    #[serde(default = "default_web_max_bytes")]
    pub max_bytes: u64,
    /// Redirects followed before giving up.
    #[serde(default = "default_max_redirects")]
    pub max_redirects: u32,
    /// Seconds a fetched page is served from the cache.
    #[serde(default = "default_web_cache_secs")]
    pub cache_secs: u64,
    /// Hosts, IP addresses or CIDR ranges fetched even though they are
    /// private, loopback or link-local (the SSRF guard refuses them
    /// otherwise), e.g. `127.0.0.1`, `10.0.0.0/8`, `nas.lan`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_private: Vec<String>,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        WebFetchConfig {
            timeout_secs: default_web_timeout(),
            max_bytes: default_web_max_bytes(),
            max_redirects: default_max_redirects(),
            cache_secs: default_web_cache_secs(),
            allow_private: Vec::new(),
        }
    }
}

fn default_web_timeout() -> u64 {
    30
}

fn default_web_max_bytes() -> u64 {
    5 * 1024 * 1024
}

fn default_max_redirects() -> u32 {
    5
}

fn default_web_cache_secs() -> u64 {
    300
}

/// `tools.web_search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    /// The search engine.
    #[serde(default)]
    pub provider: SearchProvider,
    /// API key (Brave, Tavily); usually `${BRAVE_SEARCH_API_KEY}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Base URL; required for SearXNG (`http://searxng:8080`), the
    /// provider's public endpoint otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Results returned when the model does not ask for a number.
    #[serde(default = "default_max_results")]
    pub max_results: u32,
    /// Seconds a search may take.
    #[serde(default = "default_search_timeout")]
    pub timeout_secs: u64,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        WebSearchConfig {
            provider: SearchProvider::default(),
            api_key: None,
            endpoint: None,
            max_results: default_max_results(),
            timeout_secs: default_search_timeout(),
        }
    }
}

fn default_max_results() -> u32 {
    5
}

fn default_search_timeout() -> u64 {
    15
}

/// A web search engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchProvider {
    /// Brave Search API (needs `api_key`).
    Brave,
    /// A SearXNG instance (needs `endpoint`; its JSON format enabled).
    Searxng,
    /// Tavily (needs `api_key`).
    Tavily,
    /// DuckDuckGo's HTML results page; no key.
    #[default]
    Duckduckgo,
}

/// `browser.*` tools: a headless Chromium or Chrome (the `browser`
/// feature, in the binaries' default build).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserToolConfig {
    /// The Chromium or Chrome program; found on `PATH` (`chromium`,
    /// `chromium-browser`, `google-chrome`…) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<PathBuf>,
    /// Seconds a session's browser may sit unused before it is closed
    /// (its profile, cookies included, stays on disk).
    #[serde(default = "default_browser_idle")]
    pub idle_secs: u64,
    /// Seconds a page may take to load (`browser.open`, and a click or
    /// a submit that navigates).
    #[serde(default = "default_browser_timeout")]
    pub timeout_secs: u64,
    /// Largest `browser.snapshot` or `browser.content` output, in bytes;
    /// a longer one is cut and says so.
    #[serde(default = "default_browser_max_output")]
    pub max_output_bytes: usize,
    /// Browsers running at once (one per session); starting one more
    /// closes the one unused longest.
    #[serde(default = "default_max_browsers")]
    pub max_browsers: usize,
    /// Hosts, IP addresses or CIDR ranges the browser may reach even
    /// though they are private, loopback or link-local (every request of
    /// the browser passes the SSRF guard otherwise), as in
    /// `tools.web_fetch.allow_private`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_private: Vec<String>,
}

impl Default for BrowserToolConfig {
    fn default() -> Self {
        BrowserToolConfig {
            executable: None,
            idle_secs: default_browser_idle(),
            timeout_secs: default_browser_timeout(),
            max_output_bytes: default_browser_max_output(),
            max_browsers: default_max_browsers(),
            allow_private: Vec::new(),
        }
    }
}

fn default_browser_idle() -> u64 {
    300
}

fn default_browser_timeout() -> u64 {
    30
}

fn default_browser_max_output() -> usize {
    16 * 1024
}

fn default_max_browsers() -> usize {
    3
}

/// `process.*` tools: background processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessToolConfig {
    /// Background processes running at once; `process.start` refuses more.
    #[serde(default = "default_max_processes")]
    pub max_processes: usize,
    /// Background processes one session may run at once (within
    /// `max_processes`), so one chat cannot take every slot.
    #[serde(default = "default_max_per_session")]
    pub max_per_session: usize,
    /// Seconds after which a background process is killed.
    #[serde(default = "default_max_runtime")]
    pub max_runtime_secs: u64,
    /// Bytes of recent output kept per process.
    #[serde(default = "default_buffer_bytes")]
    pub buffer_bytes: usize,
}

impl Default for ProcessToolConfig {
    fn default() -> Self {
        ProcessToolConfig {
            max_processes: default_max_processes(),
            max_per_session: default_max_per_session(),
            max_runtime_secs: default_max_runtime(),
            buffer_bytes: default_buffer_bytes(),
        }
    }
}

fn default_max_processes() -> usize {
    10
}

fn default_max_per_session() -> usize {
    4
}

fn default_max_runtime() -> u64 {
    3600
}

fn default_buffer_bytes() -> usize {
    64 * 1024
}
