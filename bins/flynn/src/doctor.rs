//! `flynn doctor`: checks the set-up piece by piece (config, keys,
//! providers, database, sandbox, gateway, chat channels, MCP servers),
//! one line each with OK, WARN or FAIL and, when not OK, the fix.

use std::path::Path;
use std::time::Duration;

use flynn_api::methods::{ChannelsStatus, SystemHealth};
use flynn_core::Tier;
use flynn_core::config::{self, Loaded, Source};
use flynn_core::gateway::api::{ChannelInfo, Health, NoParams};
use flynn_core::protocol::config::{FlynnConfig, McpTransport, ProviderKind};
use flynn_core::tools::sandbox::{SandboxReport, Strength};
use serde::Serialize;
use serde_json::json;

use crate::cli::DoctorArgs;
use crate::env::CliEnv;
use crate::exit::Failure;
use crate::remote;

/// How long a provider or the daemon gets to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Serialize)]
struct Check {
    check: &'static str,
    status: Status,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

impl Check {
    fn ok(check: &'static str, message: impl Into<String>) -> Self {
        Check {
            check,
            status: Status::Ok,
            message: message.into(),
            fix: None,
        }
    }

    fn warn(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            check,
            status: Status::Warn,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            check,
            status: Status::Fail,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }
}

pub async fn run(args: DoctorArgs) -> Result<(), Failure> {
    let checks = checks(&args).await;
    if args.json {
        outln!("{}", json!(checks));
    } else {
        for check in &checks {
            let status = match check.status {
                Status::Ok => "OK  ",
                Status::Warn => "WARN",
                Status::Fail => "FAIL",
            };
            outln!("{status}  {:<9} {}", check.check, check.message);
            if let Some(fix) = &check.fix {
                outln!("                fix: {fix}");
            }
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if failed == 0 {
        Ok(())
    } else {
        // The report already said what failed.
        Err(Failure {
            code: 1,
            message: if args.json {
                String::new()
            } else {
                format!("{failed} check(s) failed")
            },
        })
    }
}

async fn checks(args: &DoctorArgs) -> Vec<Check> {
    let mut out = Vec::new();
    let loaded = match config::load(args.config.as_deref(), &CliEnv) {
        Ok(loaded) => loaded,
        Err(error) => {
            out.push(Check::fail(
                "config",
                error.to_string(),
                "correct the file (`flynn config validate` lists every problem; `flynn onboard` writes a new one)",
            ));
            return out;
        }
    };
    out.push(config_line(&loaded));
    out.extend(tier_lines(&loaded.config));
    out.extend(provider_lines(&loaded.config).await);
    out.push(database_line(&loaded).await);
    out.push(sandbox_line(&loaded).await);
    #[cfg(feature = "browser")]
    out.push(browser_line(&loaded.config).await);
    out.extend(voice_lines(&loaded.config));
    out.extend(google_lines(&loaded.config));
    let mut live = None;
    out.extend(gateway_lines(args, &loaded, &mut live).await);
    out.extend(channel_lines(&loaded.config, live));
    let workspace = crate::workspace::resolve(&loaded);
    out.extend(mcp_lines(&loaded.config, &workspace.path).await);
    out.extend(security_lines(&loaded, &workspace));
    out
}

/// With `google` configured: the OAuth client, then each account signed
/// in and what it allows, from the auth store (nothing is asked of
/// Google).
fn google_lines(config: &FlynnConfig) -> Vec<Check> {
    use flynn_core::config::Env as _;
    use flynn_core::google::{Google, service_granted};
    use flynn_core::protocol::config::GoogleService;

    let Some(block) = &config.google else {
        return Vec::new();
    };
    let google = match Google::from_config(block, |name| CliEnv.var(name)) {
        Ok(google) => google,
        Err(error) => {
            return vec![Check::fail(
                "google",
                error.to_string(),
                "set google.auth_file, or HOME",
            )];
        }
    };
    let mut lines = Vec::new();
    if google.client().is_none() {
        lines.push(Check::warn(
            "google",
            "no OAuth client: signing in needs google.client_id and google.client_secret (or GOOGLE_CLIENT_ID and GOOGLE_CLIENT_SECRET)",
            "make a Desktop app client in your Google Cloud project (docs/google.md, step 1)",
        ));
    }
    let file = match google.store().load() {
        Ok(file) => file,
        Err(error) => {
            lines.push(Check::fail(
                "google",
                error.to_string(),
                "fix or move the file, then `flynn auth google login`",
            ));
            return lines;
        }
    };
    if file.google.accounts.is_empty() {
        lines.push(Check::warn(
            "google",
            format!(
                "no account signed in ({}): the Google tools will say so",
                google.store().path().display()
            ),
            "flynn auth google login",
        ));
        return lines;
    }
    for (email, account) in &file.google.accounts {
        let scopes = account.scopes();
        let missing: Vec<&str> = google
            .services()
            .iter()
            .filter(|s| !service_granted(**s, &scopes))
            .map(|s: &GoogleService| s.as_str())
            .collect();
        let can_refresh = account.grants.iter().any(|g| g.refresh_token.is_some());
        if !can_refresh {
            lines.push(Check::warn(
                "google",
                format!(
                    "{email}: no refresh token kept; it signs out when its access token expires"
                ),
                format!("flynn auth google login --account {email}"),
            ));
        } else if missing.is_empty() {
            lines.push(Check::ok(
                "google",
                format!("{email}: signed in, allows every service configured"),
            ));
        } else {
            lines.push(Check::warn(
                "google",
                format!(
                    "{email}: signed in, but does not allow {}",
                    missing.join(", ")
                ),
                format!(
                    "flynn auth google login --account {email} --services {}",
                    missing.join(",")
                ),
            ));
        }
    }
    lines
}

/// One line per MCP server of `mcp.servers`: each enabled one is started
/// here (all at once, each within its `startup_timeout_secs`), its tools
/// listed, and stopped again.
async fn mcp_lines(config: &FlynnConfig, workspace: &Path) -> Vec<Check> {
    let mut starts = tokio::task::JoinSet::new();
    let mut lines: Vec<(usize, Check)> = Vec::new();
    for (index, (name, server)) in config.mcp.servers.iter().enumerate() {
        if !server.enabled {
            lines.push((
                index,
                Check::ok(
                    "mcp",
                    format!("{name}: turned off (mcp.servers.{name}.enabled), not checked"),
                ),
            ));
            continue;
        }
        let name = name.clone();
        let server = server.clone();
        let workspace = workspace.to_path_buf();
        starts.spawn(async move {
            let started = crate::mcp::start_one(&name, server.clone(), &workspace).await;
            let check = if started.is_up() {
                Check::ok(
                    "mcp",
                    format!(
                        "{name}: {} tool(s) from {} in {} ms",
                        started.status.tools,
                        started
                            .status
                            .server
                            .as_deref()
                            .unwrap_or("a server with no name"),
                        started.elapsed.as_millis()
                    ),
                )
            } else {
                let fix = match server.transport() {
                    McpTransport::Stdio => format!(
                        "check that `{}` runs here (`flynn mcp test {name}` shows what it wrote to stderr) and correct mcp.servers.{name}",
                        server.target()
                    ),
                    _ => format!(
                        "check that {} answers and that mcp.servers.{name} has the right credentials (`flynn mcp test {name}`)",
                        server.target()
                    ),
                };
                Check::fail("mcp", format!("{name}: {}", started.reason()), fix)
            };
            started.server.stop().await;
            (index, check)
        });
    }
    while let Some(joined) = starts.join_next().await {
        if let Ok(line) = joined {
            lines.push(line);
        }
    }
    lines.sort_by_key(|(index, _)| *index);
    lines.into_iter().map(|(_, check)| check).collect()
}

/// One line per configured chat channel: its live state when a daemon
/// answered, else whether this build can run it.
fn channel_lines(config: &FlynnConfig, live: Option<Vec<ChannelInfo>>) -> Vec<Check> {
    let configured = config.channels.access();
    let mut lines = Vec::new();
    for (name, access) in configured {
        let key = format!("channels.{name}");
        if !access.enabled {
            lines.push(Check::ok(
                "channel",
                format!("{name}: turned off ({key}.enabled)"),
            ));
            continue;
        }
        let status = live
            .as_ref()
            .and_then(|all| all.iter().find(|c| c.name == name));
        let Some(status) = status else {
            if !flynn_core::channel::COMPILED.contains(&name) {
                lines.push(Check::fail(
                    "channel",
                    format!("{name}: configured, but this build of Flynn has no {name} support"),
                    format!(
                        "it was left out of this build: rebuild with the default features (`cargo install --path bins/flynn-daemon`), or add `--features {name}` to a `--no-default-features` build (the same for bins/flynn)"
                    ),
                ));
            } else if live.is_some() {
                lines.push(Check::warn(
                    "channel",
                    format!("{name}: configured, but the running daemon does not run it"),
                    "restart the daemon so it reads the config (`flynn start`, `systemctl --user restart flynn`)",
                ));
            } else {
                lines.push(Check::ok(
                    "channel",
                    format!("{name}: configured; its connection is checked while the daemon runs"),
                ));
            }
            continue;
        };
        let policy = match access.dm_policy {
            flynn_core::protocol::config::DmPolicy::Pairing => "pairing for strangers",
            flynn_core::protocol::config::DmPolicy::Allowlist => "allowlist only",
            flynn_core::protocol::config::DmPolicy::Open => "open to anyone",
        };
        match status.state.as_str() {
            "connected" => lines.push(Check::ok(
                "channel",
                format!(
                    "{name}: connected as {}, {} message(s) received, {policy}",
                    status.detail.as_deref().unwrap_or("the bot"),
                    status.received
                ),
            )),
            "standby" => lines.push(Check::ok(
                "channel",
                format!(
                    "{name}: on standby: node {} holds its connection, this one takes over if it stops",
                    status.detail.as_deref().unwrap_or("another node")
                ),
            )),
            "connecting" => lines.push(Check::warn(
                "channel",
                format!("{name}: still connecting"),
                "run `flynn doctor` again in a few seconds",
            )),
            "unavailable" => lines.push(Check::fail(
                "channel",
                format!(
                    "{name}: cannot run: {}",
                    status.last_error.as_deref().unwrap_or("no reason given")
                ),
                format!("correct {key} and restart the daemon"),
            )),
            _ if status.unauthorized => lines.push(Check::fail(
                "channel",
                format!(
                    "{name}: the platform refused the credentials: {}",
                    status.last_error.as_deref().unwrap_or("")
                ),
                format!(
                    "check the token in {key} (docs/channels/{name}.md), then restart the daemon"
                ),
            )),
            _ => lines.push(Check::fail(
                "channel",
                format!(
                    "{name}: not connected ({} restarts): {}{}",
                    status.restarts,
                    status.last_error.as_deref().unwrap_or("no error recorded"),
                    status
                        .retry_in_ms
                        .map(|ms| format!("; next attempt in {} s", ms.div_ceil(1000)))
                        .unwrap_or_default()
                ),
                format!("check the network and {key}; the daemon keeps retrying"),
            )),
        }
    }
    lines
}

fn config_line(loaded: &Loaded) -> Check {
    let version = loaded.config.version;
    match &loaded.source {
        Source::File(path) => {
            let profile = loaded
                .overlay
                .as_ref()
                .map(|o| format!(", profile {}", o.profile))
                .unwrap_or_default();
            Check::ok(
                "config",
                format!("{} (version {version}{profile})", path.display()),
            )
        }
        Source::Environment => Check::warn(
            "config",
            format!(
                "no file at {}: running on environment variables alone",
                loaded.paths.config_file.display()
            ),
            "write a config file with `flynn onboard` to keep the set-up in one place",
        ),
    }
}

fn tier_lines(config: &FlynnConfig) -> Vec<Check> {
    if config.providers.is_empty() {
        return vec![Check::fail(
            "models",
            "no model provider is configured",
            "set ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or OLLAMA_HOST, run `flynn onboard`, or download a model to run in process with `flynn models pull <owner>/<repo>/<file.gguf>`",
        )];
    }
    let tiers = &config.models.tiers;
    let mut lines = Vec::new();
    let mut named = Vec::new();
    for tier in Tier::ALL {
        let models = tiers.get(tier);
        if let Some(first) = models.first() {
            named.push(format!("{tier} → {first}"));
        }
    }
    if tiers.default.is_empty() {
        lines.push(Check::fail(
            "models",
            "the default tier has no model",
            "set models.tiers.default, e.g. `flynn config set models.tiers.default '[\"openai/gpt-4o-mini\"]'`",
        ));
    } else {
        lines.push(Check::ok("models", named.join(", ")));
    }
    lines
}

async fn provider_lines(config: &FlynnConfig) -> Vec<Check> {
    let mut probes = tokio::task::JoinSet::new();
    let mut lines = Vec::new();
    for (index, (name, provider)) in config.providers.iter().enumerate() {
        if provider.kind == ProviderKind::Local {
            lines.push(local_line(name, provider));
            continue;
        }
        let name = name.clone();
        let provider = provider.clone();
        probes.spawn(async move {
            let result = flynn_core::models::probe(&name, &provider, PROBE_TIMEOUT).await;
            (index, name, provider, result)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = probes.join_next().await {
        if let Ok(result) = joined {
            results.push(result);
        }
    }
    results.sort_by_key(|(index, ..)| *index);
    for (_, name, provider, result) in results {
        let base = provider.base_url.clone().unwrap_or_else(|| {
            provider
                .kind
                .default_base_url()
                .unwrap_or_default()
                .to_owned()
        });
        match result {
            Ok(probe) => {
                let millis = probe.latency.as_millis();
                lines.push(Check::ok(
                    "provider",
                    format!(
                        "{name} ({}): {} answered in {millis} ms, {} model(s)",
                        provider.kind,
                        probe.url,
                        probe.models.len()
                    ),
                ));
                if provider.kind == ProviderKind::Ollama {
                    lines.extend(missing_ollama_models(config, &name, &probe.models));
                }
            }
            Err(error) => lines.push(provider_failure(&name, &provider.kind, &base, &error)),
        }
    }
    lines
}

/// A `kind: local` provider: its model file, read here (not loaded).
fn local_line(name: &str, provider: &flynn_core::protocol::config::ProviderConfig) -> Check {
    let Some(path) = provider.model_path.as_deref() else {
        return Check::fail(
            "provider",
            format!("{name} (local): no model_path"),
            format!(
                "set providers.{name}.model_path to a GGUF file (`flynn models pull` downloads one)"
            ),
        );
    };
    if !path.is_file() {
        return Check::fail(
            "provider",
            format!("{name} (local): {} does not exist", path.display()),
            "download it with `flynn models pull <owner>/<repo>/<file.gguf>` and set model_path to the path it prints",
        );
    }
    let model = crate::models::describe(path);
    let summary = format!(
        "{name} (local): {}, {}, {:.1} MB, context {}",
        model.file,
        model.family.as_deref().unwrap_or("unknown family"),
        model.size as f64 / 1_000_000.0,
        model.context_text(provider.context)
    );
    match model.problem {
        Some(problem) => Check::fail(
            "provider",
            format!("{summary}: {problem}"),
            "use a GGUF of the llama, qwen2, qwen3 or phi3 family with a flynn built with --features local-llm",
        ),
        None => Check::ok("provider", summary),
    }
}

fn provider_failure(
    name: &str,
    kind: &ProviderKind,
    base: &str,
    error: &flynn_core::models::Error,
) -> Check {
    use flynn_core::models::Error;
    // The error names the provider already; a server's error page is cut
    // to its first line.
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    let message = if first.chars().count() > 200 || text.contains('\n') {
        format!("{}…", first.chars().take(200).collect::<String>())
    } else {
        text.clone()
    };
    match error {
        // It answered: it is up, it just has no model list to show.
        Error::Server { status, .. } | Error::InvalidRequest { status, .. }
            if matches!(status, 404 | 405 | 501) =>
        {
            Check::warn(
                "provider",
                format!("{name} ({kind}) answers at {base}, but lists no models (HTTP {status})"),
                "nothing to do if messages work (`flynn send hello`); some servers do not serve GET /models",
            )
        }
        Error::MissingApiKey { env, .. } => Check::fail(
            "provider",
            message,
            match env {
                Some(env) => format!("export {env}=... or set providers.{name}.api_key"),
                None => format!("set providers.{name}.api_key"),
            },
        ),
        Error::Config { .. } if *kind == ProviderKind::Bedrock => Check::warn(
            "provider",
            message,
            "check AWS credentials with `aws sts get-caller-identity`",
        ),
        error if error.is_auth() => Check::fail(
            "provider",
            message,
            format!("the server refused the key: check providers.{name}.api_key"),
        ),
        _ => Check::fail(
            "provider",
            message,
            format!("start the server or correct providers.{name}.base_url (now {base})"),
        ),
    }
}

/// Ollama answers only for pulled models; a tier naming another fails at
/// the first message.
fn missing_ollama_models(config: &FlynnConfig, provider: &str, listed: &[String]) -> Vec<Check> {
    let mut lines = Vec::new();
    for tier in Tier::ALL {
        for model in config.models.tiers.get(tier) {
            if model.provider() != provider {
                continue;
            }
            let name = model.model();
            let pulled = listed
                .iter()
                .any(|id| id == name || id.strip_suffix(":latest") == Some(name));
            if !pulled {
                lines.push(Check::warn(
                    "provider",
                    format!("{provider}: tier {tier} uses {name}, which Ollama has not pulled"),
                    format!("ollama pull {name}"),
                ));
            }
        }
    }
    lines
}

async fn database_line(loaded: &Loaded) -> Check {
    let location = flynn_core::sessions::location(&loaded.config.sessions, &loaded.paths.home);
    let where_ = match &location {
        Ok(location) => location.redacted(),
        Err(error) => {
            return Check::fail("database", error.to_string(), "correct sessions.url");
        }
    };
    if let Ok(flynn_core::sessions::StoreLocation::Postgres(_)) = &location {
        return postgres_line(loaded, &where_).await;
    }
    if let Ok(flynn_core::sessions::StoreLocation::Sqlite(path)) = &location
        && !path.exists()
    {
        // Opening would create it; doctor changes nothing.
        return Check::ok(
            "database",
            format!("{where_}: not created yet (the first message creates it)"),
        );
    }
    let Ok(flynn_core::sessions::StoreLocation::Sqlite(path)) = &location else {
        return Check::fail("database", where_, "correct sessions.url");
    };
    use flynn_core::Conversations as _;
    let store = match flynn_core::sessions::SqliteStore::open(path).await {
        Ok(store) => store,
        Err(error) => {
            return Check::fail(
                "database",
                format!("{where_}: {error}"),
                "make sure the directory exists and is writable (FLYNN_HOME or sessions.url)",
            );
        }
    };
    let restore = "restore a backup (`flynn restore <archive>`), or save what is readable: `sqlite3 <file> .recover | sqlite3 recovered.db`";
    let checked = store.quick_check().await;
    let listed = store.list().await;
    store.close().await;
    match (checked, listed) {
        (Ok(problems), _) if !problems.is_empty() => Check::fail(
            "database",
            format!(
                "{where_}: failed its integrity check: {}",
                problems
                    .iter()
                    .take(3)
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            restore,
        ),
        (Err(error), _) | (_, Err(error)) => {
            Check::fail("database", format!("{where_}: {error}"), restore)
        }
        (Ok(_), Ok(sessions)) => Check::ok(
            "database",
            format!(
                "{where_}: {} session(s), integrity check passed",
                sessions.len()
            ),
        ),
    }
}

/// The PostgreSQL store: reachable, its schema current (opening brings it
/// up to date, as the daemon's start would), how many sessions it holds.
async fn postgres_line(loaded: &Loaded, where_: &str) -> Check {
    let url = match flynn_core::sessions::location(&loaded.config.sessions, &loaded.paths.home) {
        Ok(flynn_core::sessions::StoreLocation::Postgres(url)) => url,
        _ => return Check::fail("database", where_, "correct sessions.url"),
    };
    let store = match flynn_core::sessions::PgStore::open(&url).await {
        Ok(store) => store,
        Err(error) => {
            return Check::fail(
                "database",
                error.to_string(),
                "check sessions.url, that the server is up, and that its role may connect and create tables",
            );
        }
    };
    use flynn_core::Conversations as _;
    let listed = store.list().await;
    let nodes = store.cluster_nodes().await;
    store.close().await;
    match listed {
        Ok(sessions) => Check::ok(
            "database",
            format!(
                "{where_}: PostgreSQL, {} session(s){}",
                sessions.len(),
                nodes.map(|nodes| cluster_text(&nodes)).unwrap_or_default()
            ),
        ),
        Err(error) => Check::fail(
            "database",
            format!("{where_}: {error}"),
            "check that the role may read Flynn's tables",
        ),
    }
}

/// The live nodes sharing the database and what each holds, after the
/// database's line: `; cluster: 2 daemon node(s): a/12/9f (3 sessions,
/// automation), ...`.
fn cluster_text(nodes: &[flynn_core::sessions::NodeInfo]) -> String {
    let live: Vec<&flynn_core::sessions::NodeInfo> = nodes.iter().filter(|n| n.alive).collect();
    let daemons = live.iter().filter(|n| n.kind == "daemon").count();
    if live.is_empty() {
        return "; cluster: no daemon running on it".to_owned();
    }
    let each: Vec<String> = live
        .iter()
        .map(|n| {
            let mut held = vec![format!("{} session(s)", n.leases)];
            held.extend(n.roles.iter().cloned());
            format!("{} {} ({})", n.kind, n.id, held.join(", "))
        })
        .collect();
    format!("; cluster: {daemons} daemon node(s): {}", each.join("; "))
}

/// The browser of the `browser.*` tools: which one and its version, or
/// how to get one. A WARN, not a FAIL: only those tools need it.
#[cfg(feature = "browser")]
async fn browser_line(config: &FlynnConfig) -> Check {
    use flynn_core::tools::builtin::browser;

    let configured = config.tools.browser.executable.as_deref();
    let path = match browser::find_executable(configured) {
        Ok(path) => path,
        Err(error) => {
            return Check::warn(
                "browser",
                format!("the browser.* tools cannot run: {error}"),
                "install Chromium (`apt install chromium` on Debian and Ubuntu) or Chrome, or set tools.browser.executable",
            );
        }
    };
    match browser::browser_version(&path).await {
        Ok(version) => Check::ok("browser", format!("{version} ({})", path.display())),
        Err(error) => Check::warn(
            "browser",
            format!("{} was found but does not run: {error}", path.display()),
            "reinstall it (`apt install --reinstall chromium`) or point tools.browser.executable at another browser",
        ),
    }
}

/// What `voice` sets up: the speech-to-text service, the speech engine
/// (a local program and `opusenc` looked for on the `PATH`), and a
/// `voice.reply` with nothing to speak. Nothing when voice is not set up.
fn voice_lines(config: &FlynnConfig) -> Vec<Check> {
    use flynn_core::protocol::config::{TtsConfig, VoiceReply};
    use flynn_core::tools::find_program;
    let find_on_path = |program: &str| find_program(std::path::Path::new(program));

    let voice = &config.voice;
    let mut lines = Vec::new();
    if let Some(stt) = &voice.stt {
        lines.push(Check::ok(
            "voice",
            format!(
                "voice notes are transcribed by {} ({})",
                stt.base_url, stt.model
            ),
        ));
    }
    match &voice.tts {
        Some(TtsConfig::Command { command }) => {
            let program = command.split_whitespace().next().unwrap_or_default();
            if find_on_path(program).is_none() {
                lines.push(Check::warn(
                    "voice",
                    format!("voice.tts runs `{program}`, which is not on the PATH"),
                    "install it (`apt install espeak-ng`, or piper) or change voice.tts.command",
                ));
            } else if find_on_path("opusenc").is_none() {
                lines.push(Check::warn(
                    "voice",
                    format!("answers are spoken by `{program}`, but without opusenc they go as WAV files, not voice notes"),
                    "install opus-tools (`apt install opus-tools`)",
                ));
            } else {
                lines.push(Check::ok(
                    "voice",
                    format!("answers are spoken by `{program}`, encoded by opusenc as voice notes (voice.reply: {})", voice.reply.as_str()),
                ));
            }
        }
        Some(TtsConfig::Openai {
            base_url, model, ..
        }) => lines.push(Check::ok(
            "voice",
            format!(
                "answers are spoken by {base_url} ({model}; voice.reply: {})",
                voice.reply.as_str()
            ),
        )),
        Some(TtsConfig::Elevenlabs {
            base_url, model, ..
        }) => lines.push(Check::ok(
            "voice",
            format!(
                "answers are spoken by {base_url} ({model}; voice.reply: {})",
                voice.reply.as_str()
            ),
        )),
        None if voice.reply != VoiceReply::Off => lines.push(Check::warn(
            "voice",
            format!(
                "voice.reply is {} but nothing speaks: answers stay text",
                voice.reply.as_str()
            ),
            "set voice.tts (openai, elevenlabs, or a local program such as espeak-ng)",
        )),
        None => {}
    }
    lines
}

/// The sandbox of shell and process tools, as `flynn sandbox` sees it.
async fn sandbox_line(loaded: &Loaded) -> Check {
    use flynn_core::tools::sandbox::{Sandbox, SandboxPaths};

    let config = &loaded.config;
    let paths = SandboxPaths::flynn(&loaded.paths.home, Some(&loaded.paths.config_file));
    let mut tools = config.tools.clone();
    tools.workspace = Some(crate::workspace::resolve(loaded).path);
    let report = Sandbox::from_tools_config(&tools)
        .with_paths(&paths)
        .report()
        .await;
    let chats: Vec<&str> = config
        .channels
        .access()
        .into_iter()
        .filter(|(_, access)| access.enabled)
        .map(|(name, _)| name)
        .collect();
    sandbox_check(&report, &chats)
}

/// OK when a sandbox isolates commands (or `none` was chosen), WARN when
/// `auto` found none, FAIL when it found none and enabled chat channels
/// (`chats`) let other people drive the tools, or when the configured
/// sandbox cannot run.
fn sandbox_check(report: &SandboxReport, chats: &[&str]) -> Check {
    let install = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`), or set tools.sandbox.mode: none to accept it; `flynn sandbox` shows every backend";
    match (report.strength(), &report.active) {
        (Strength::NoneFound, _) if !chats.is_empty() => Check::fail(
            "sandbox",
            format!(
                "no sandbox (tools.sandbox.mode: auto found none) while chat channels are enabled ({}): whoever may message the bot can run commands as Flynn's user, reading FLYNN_HOME, ~/.ssh and the config",
                chats.join(", ")
            ),
            install,
        ),
        (Strength::NoneFound, _) => Check::warn(
            "sandbox",
            "no sandbox (tools.sandbox.mode: auto found none): shell and process tools run as Flynn's user",
            install,
        ),
        (Strength::NoneChosen, _) => Check::ok(
            "sandbox",
            "none, as chosen (tools.sandbox.mode: none): shell and process tools run as Flynn's user, with a cleared environment",
        ),
        (_, Err(error)) if error.is_exposed() => Check::fail(
            "sandbox",
            error.to_string(),
            "change the setting the message names (`flynn sandbox` shows what commands see)",
        ),
        (_, Err(error)) => Check::fail(
            "sandbox",
            error.to_string(),
            "install the sandbox tools.sandbox.mode names, or set it to auto (`flynn sandbox` explains)",
        ),
        (Strength::Partial, Ok(backend)) => Check::ok(
            "sandbox",
            format!(
                "{} (network: {}; Unix sockets by path stay reachable)",
                backend.name(),
                report.network
            ),
        ),
        (_, Ok(backend)) => Check::ok(
            "sandbox",
            format!("{} (network: {})", backend.name(), report.network),
        ),
    }
}

async fn gateway_lines(
    args: &DoctorArgs,
    loaded: &Loaded,
    channels: &mut Option<Vec<ChannelInfo>>,
) -> Vec<Check> {
    let mut lines = Vec::new();
    let gateway = &loaded.config.gateway;
    let token_set = gateway
        .token
        .as_deref()
        .is_some_and(|t| !t.trim().is_empty())
        || std::env::var("FLYNN_GATEWAY_TOKEN").is_ok_and(|t| !t.trim().is_empty());
    if flynn_core::gateway::binds_beyond_loopback(&gateway.bind) && !token_set {
        lines.push(Check::fail(
            "gateway",
            format!(
                "gateway.bind {} reaches beyond this machine without a set token: the daemon refuses to start",
                gateway.bind
            ),
            "set gateway.token (or FLYNN_GATEWAY_TOKEN), or bind to 127.0.0.1",
        ));
    }
    lines.extend(token_file_line(&loaded.paths.home));

    let url = args
        .gateway
        .clone()
        .or_else(|| std::env::var("FLYNN_GATEWAY_URL").ok())
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| format!("http://{}", local_address(&gateway.bind)));
    let target = match remote::target(Some(&url), args.config.as_deref()) {
        Ok(Some(target)) => target,
        Ok(None) => return lines,
        Err(failure) => {
            lines.push(Check::fail(
                "gateway",
                failure.message,
                "give --gateway as http://HOST:PORT",
            ));
            return lines;
        }
    };
    let health = tokio::time::timeout(PROBE_TIMEOUT, async {
        let client = remote::connect(&target).await?;
        let health: Health = remote::call::<SystemHealth>(&target, &client, &NoParams {}).await?;
        let live: Option<Vec<ChannelInfo>> =
            remote::call::<ChannelsStatus>(&target, &client, &NoParams {})
                .await
                .ok();
        Ok::<_, Failure>((health, live))
    })
    .await;
    let health = match health {
        Ok(Ok((health, live))) => {
            *channels = live;
            Ok(Ok(health))
        }
        Ok(Err(e)) => Ok(Err(e)),
        Err(e) => Err(e),
    };
    match health {
        Ok(Ok(health)) => lines.push(Check::ok(
            "gateway",
            format!(
                "daemon {} at {url}: {}, up {} s, {} session(s), {} turn(s) running",
                health.version,
                health.status,
                health.uptime_secs,
                health.active_sessions,
                health.running_turns
            ),
        )),
        Ok(Err(failure)) if failure.message.contains("refused the token") => {
            lines.push(Check::fail(
                "gateway",
                failure.message,
                "export FLYNN_GATEWAY_TOKEN with the daemon's token (in its FLYNN_HOME/gateway.token)",
            ));
        }
        Ok(Err(_)) => lines.push(Check::warn(
            "gateway",
            format!("no daemon answers at {url}"),
            "start it with `flynn start` or `systemctl --user start flynn` (commands run embedded meanwhile)",
        )),
        Err(_) => lines.push(Check::warn(
            "gateway",
            format!("the daemon at {url} did not answer within {} s", PROBE_TIMEOUT.as_secs()),
            "check the daemon's log (`journalctl --user -u flynn`)",
        )),
    }
    lines
}

/// The address to reach a daemon bound to `bind` from this machine.
fn local_address(bind: &str) -> String {
    match bind.rsplit_once(':') {
        Some(("0.0.0.0" | "[::]" | "::", port)) => format!("127.0.0.1:{port}"),
        _ => bind.to_owned(),
    }
}

/// The generated token must be readable by its owner only.
fn token_file_line(home: &Path) -> Option<Check> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let path = home.join(flynn_core::gateway::TOKEN_FILE);
        let mode = std::fs::metadata(&path).ok()?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Some(Check::warn(
                "gateway",
                format!("{} is readable by others (mode {mode:o})", path.display()),
                format!("chmod 600 {}", path.display()),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = home;
    None
}

/// The settings the security promises rest on (docs/security.md): where
/// tools work, who can read Flynn's files, who can reach the gateway.
fn security_lines(loaded: &Loaded, workspace: &config::Workspace) -> Vec<Check> {
    let mut lines = vec![workspace_line(loaded, workspace)];
    lines.extend(file_mode_line(&loaded.paths.home));
    lines.push(listener_line(&loaded.config));
    lines.extend(owner_lines(&loaded.config));
    lines
}

/// Each chat channel either names its owners or treats every sender as
/// a guest: say which, and how to name them.
fn owner_lines(config: &FlynnConfig) -> Vec<Check> {
    config
        .channels
        .access()
        .into_iter()
        .filter(|(_, access)| access.enabled)
        .map(|(name, access)| {
            if access.owners.is_empty() {
                Check::warn(
                    "security",
                    format!(
                        "{name}: no owners named, so every sender is a guest (own session and memory, the messaging tools, no approvals)"
                    ),
                    format!(
                        "add your own {name} id to channels.{name}.owners, or approve yourself with `flynn pairing approve {name} <code> --owner`"
                    ),
                )
            } else {
                Check::ok(
                    "security",
                    format!(
                        "{name}: owners {}; everyone else let in is a guest",
                        access.owners.join(", ")
                    ),
                )
            }
        })
        .collect()
}

fn workspace_line(loaded: &Loaded, workspace: &config::Workspace) -> Check {
    let path = &workspace.path;
    let shown = path.display();
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let home_dir = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let broad = real(path).parent().is_none()
        || home_dir
            .as_deref()
            .is_some_and(|home| real(home) == real(path));
    if broad {
        return Check::warn(
            "security",
            format!(
                "the workspace is {shown} (tools.workspace): file tools and commands reach everything in it"
            ),
            "set tools.workspace to a project directory, or remove it to use FLYNN_HOME/workspace",
        );
    }
    if real(&loaded.paths.home).starts_with(real(path)) {
        return Check::warn(
            "security",
            format!(
                "the workspace {shown} holds FLYNN_HOME ({}): file tools refuse it and bubblewrap hides it, but Landlock cannot run commands",
                loaded.paths.home.display()
            ),
            "set tools.workspace to a directory outside FLYNN_HOME",
        );
    }
    let how = match workspace.origin {
        config::WorkspaceOrigin::Configured => "tools.workspace",
        config::WorkspaceOrigin::CurrentDir => {
            "the current directory, for `flynn send` without a daemon; the daemon uses FLYNN_HOME/workspace"
        }
        config::WorkspaceOrigin::Default => "FLYNN_HOME/workspace, the default",
    };
    Check::ok("security", format!("workspace {shown} ({how})"))
}

/// FLYNN_HOME and what holds conversations in it must be private.
fn file_mode_line(home: &Path) -> Option<Check> {
    if !home.exists() {
        return None;
    }
    let open = open_to_others(home);
    Some(if open.is_empty() {
        Check::ok(
            "security",
            format!("{} and its data are private to this user", home.display()),
        )
    } else {
        Check::warn(
            "security",
            format!("readable by other users: {}", open.join(", ")),
            format!("chmod -R go-rwx {}", home.display()),
        )
    })
}

/// FLYNN_HOME and the data in it that others may read, with their modes.
#[cfg(unix)]
fn open_to_others(home: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let names = [
        "",
        "sessions.db",
        "sessions.db-wal",
        "memory",
        "audit",
        "inbox",
        "skills",
        "workspace",
    ];
    names
        .iter()
        .map(|name| {
            if name.is_empty() {
                home.to_path_buf()
            } else {
                home.join(name)
            }
        })
        .filter_map(|path| {
            let mode = std::fs::metadata(&path).ok()?.permissions().mode() & 0o777;
            (mode & 0o077 != 0).then(|| format!("{} ({mode:o})", path.display()))
        })
        .collect()
}

#[cfg(not(unix))]
fn open_to_others(_home: &Path) -> Vec<String> {
    Vec::new()
}

fn listener_line(config: &FlynnConfig) -> Check {
    let bind = &config.gateway.bind;
    if !config.gateway.tailscale_users.is_empty() && config.gateway.tailscale.listen.is_none() {
        return Check::warn(
            "security",
            "gateway.tailscale_users is no longer honoured: Tailscale users need a token until the Tailscale listener is set".to_owned(),
            "set gateway.tailscale.listen (unix:/run/flynn/ts.sock), .host and .users, and run `tailscale serve unix:/run/flynn/ts.sock` (docs/security.md)",
        );
    }
    if let Some(listen) = &config.gateway.tailscale.listen
        && !listen.starts_with("unix:")
    {
        return Check::warn(
            "security",
            format!(
                "the Tailscale listener {listen} is a TCP port: any process on this machine can send it identity headers for an address tailscaled knows"
            ),
            "use a Unix socket (gateway.tailscale.listen: unix:/run/flynn/ts.sock), which only the daemon's user and tailscaled can open",
        );
    }
    if flynn_core::gateway::binds_beyond_loopback(bind) {
        Check::warn(
            "security",
            format!("the gateway listens on {bind}, beyond this machine"),
            "keep the token long and secret, and put TLS in front (a reverse proxy or tailscale serve), or bind to 127.0.0.1",
        )
    } else {
        Check::ok(
            "security",
            format!("the gateway listens on {bind}, this machine only"),
        )
    }
}

#[cfg(test)]
mod tests {
    use flynn_core::protocol::config::SandboxMode;
    use flynn_core::tools::sandbox::{Availability, Backend};

    use super::*;

    fn report(requested: SandboxMode, active: Backend) -> SandboxReport {
        SandboxReport {
            requested,
            active: Ok(active),
            backends: vec![(
                Backend::Bubblewrap,
                Availability::Unavailable {
                    reason: "bwrap is not on PATH".to_owned(),
                },
            )],
            network: "not restricted (no sandbox)".to_owned(),
            network_isolated: false,
            writable: vec![],
            readable: vec![],
            hidden: vec![],
            environment: String::new(),
        }
    }

    fn verdict(check: &Check) -> (Status, &str, Option<&str>) {
        (check.status, check.message.as_str(), check.fix.as_deref())
    }

    const INSTALL: &str = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`), or set tools.sandbox.mode: none to accept it; `flynn sandbox` shows every backend";

    #[test]
    fn auto_finding_no_sandbox_warns_and_fails_with_chat_channels() {
        let found_none = report(SandboxMode::Auto, Backend::None);
        assert_eq!(
            verdict(&sandbox_check(&found_none, &[])),
            (
                Status::Warn,
                "no sandbox (tools.sandbox.mode: auto found none): shell and process tools run as Flynn's user",
                Some(INSTALL)
            )
        );
        assert_eq!(
            verdict(&sandbox_check(&found_none, &["telegram", "slack"])),
            (
                Status::Fail,
                "no sandbox (tools.sandbox.mode: auto found none) while chat channels are enabled (telegram, slack): whoever may message the bot can run commands as Flynn's user, reading FLYNN_HOME, ~/.ssh and the config",
                Some(INSTALL)
            )
        );
        let chosen = report(SandboxMode::None, Backend::None);
        assert_eq!(
            verdict(&sandbox_check(&chosen, &["telegram"])),
            (
                Status::Ok,
                "none, as chosen (tools.sandbox.mode: none): shell and process tools run as Flynn's user, with a cleared environment",
                None
            )
        );
        let isolated = SandboxReport {
            network: "isolated (a network namespace of its own, loopback only)".to_owned(),
            ..report(SandboxMode::Auto, Backend::Bubblewrap)
        };
        assert_eq!(
            verdict(&sandbox_check(&isolated, &["telegram"])),
            (
                Status::Ok,
                "bubblewrap (network: isolated (a network namespace of its own, loopback only))",
                None
            )
        );
    }
}
