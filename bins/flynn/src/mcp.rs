//! `flynn mcp`: the MCP servers whose tools Flynn uses (`list`, `tools`,
//! `test`: each started here, on its own) and Flynn as an MCP server for
//! other agents (`serve`, on stdin and stdout).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_api::methods::McpStatus;
use flynn_core::config::{self, Loaded, Source};
use flynn_core::gateway::api::{McpServerStatus, NoParams};
use flynn_core::mcp::{McpServer, Phase, ServerStatus};
use flynn_core::protocol::ToolEffect;
use flynn_core::protocol::config::{McpConfig, McpServerConfig};
use flynn_core::tools::ToolSource;
use flynn_core::{CancellationToken, Flynn, Tool, ToolContext};
use serde_json::{Value, json};

use crate::cli::{McpArgs, McpCommand};
use crate::env::CliEnv;
use crate::exit::Failure;
use crate::remote;

pub async fn run(args: McpArgs) -> Result<(), Failure> {
    let config = args.config.as_deref();
    match args.command {
        McpCommand::List { gateway, json } => list(config, gateway.as_deref(), json).await,
        McpCommand::Tools { server, json } => tools(config, &server, json).await,
        McpCommand::Test { server, call, args } => {
            test(config, &server, call.as_deref(), args.as_deref()).await
        }
        McpCommand::Serve { gateway } => serve(config, gateway.as_deref()).await,
    }
}

/// How a tool's effect reads in a listing.
fn effect(effect: ToolEffect) -> &'static str {
    match effect {
        ToolEffect::ReadOnly => "read-only",
        ToolEffect::External => "external",
        other => other.as_str(),
    }
}

/// A server started here, on its own, and how its first start went.
pub(crate) struct Started {
    pub server: Arc<McpServer>,
    pub status: ServerStatus,
    pub elapsed: Duration,
}

impl Started {
    pub(crate) fn is_up(&self) -> bool {
        self.status.phase == Phase::Running
    }

    /// Why it is not up, with the last lines it wrote to stderr.
    pub(crate) fn reason(&self) -> String {
        match &self.status.error {
            Some(error) => error.clone(),
            None => format!(
                "it did not finish starting and listing its tools within {}s (mcp.servers.{}.startup_timeout_secs)",
                self.server.config().startup_timeout_secs.max(1),
                self.status.name
            ),
        }
    }
}

/// Starts the server `name` with `config` and waits for its first start
/// to end (up to its `startup_timeout_secs`).
pub(crate) async fn start_one(name: &str, config: McpServerConfig, workspace: &Path) -> Started {
    let server = McpServer::new(name, config, workspace);
    let begun = Instant::now();
    server.ready().await;
    let elapsed = begun.elapsed();
    let status = server.status();
    Started {
        server,
        status,
        elapsed,
    }
}

/// The configured server `name`, or a usage error naming the ones there
/// are.
fn configured<'a>(loaded: &'a Loaded, name: &str) -> Result<&'a McpServerConfig, Failure> {
    let servers = &loaded.config.mcp.servers;
    if let Some(server) = servers.get(name) {
        return Ok(server);
    }
    let file = match &loaded.source {
        Source::File(path) => path.display().to_string(),
        Source::Environment => "the config (there is no config file)".to_owned(),
    };
    Err(Failure::usage(if servers.is_empty() {
        format!("no MCP server '{name}': {file} has none under mcp.servers (see docs/mcp.md)")
    } else {
        let names: Vec<&str> = servers.keys().map(String::as_str).collect();
        format!(
            "no MCP server '{name}' in {file} (configured: {})",
            names.join(", ")
        )
    }))
}

/// Starts one configured server for `tools` and `test`, or fails with
/// why it did not start.
async fn start_configured(loaded: &Loaded, name: &str) -> Result<Started, Failure> {
    let server = configured(loaded, name)?;
    if !server.enabled {
        eprintln!("note: mcp.servers.{name}.enabled is false; starting it here anyway");
    }
    let started = start_one(
        name,
        server.clone(),
        &crate::workspace::resolve(loaded).path,
    )
    .await;
    if started.is_up() {
        return Ok(started);
    }
    let mut message = format!("MCP server '{name}' did not start: {}", started.reason());
    let stderr = started.server.stderr_tail();
    if !stderr.is_empty() {
        message.push_str("\nits last lines on stderr:");
        for line in stderr {
            message.push_str("\n  ");
            message.push_str(&line);
        }
    }
    message.push_str(&format!(
        "\ncheck mcp.servers.{name} ({}: {})",
        server.transport().as_str(),
        server.target()
    ));
    started.server.stop().await;
    Err(Failure::other(message))
}

async fn list(
    config: Option<&Path>,
    gateway: Option<&str>,
    json_output: bool,
) -> Result<(), Failure> {
    let loaded = config::load(config, &CliEnv)?;
    let live: Option<Vec<McpServerStatus>> = match remote::target(gateway, config)? {
        Some(target) => {
            let client = remote::connect(&target).await?;
            Some(remote::call::<McpStatus>(&target, &client, &NoParams {}).await?)
        }
        None => None,
    };
    let rows = rows(&loaded.config.mcp, live.as_deref());
    if json_output {
        outln!("{}", Value::Array(rows.iter().map(Row::json).collect()));
        return Ok(());
    }
    if rows.is_empty() {
        outln!("no MCP servers are configured (add them under mcp.servers; see docs/mcp.md)");
        return Ok(());
    }
    let mut header = vec!["NAME", "TRANSPORT", "ENABLED", "START"];
    if live.is_some() {
        header.push("STATUS");
    }
    header.push("TARGET");
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    for row in &rows {
        let mut line = vec![
            row.name.clone(),
            row.transport.clone(),
            if row.enabled { "yes" } else { "no" }.to_owned(),
            row.start.to_owned(),
        ];
        if live.is_some() {
            line.push(row.state());
        }
        line.push(row.target.clone());
        table.push(line);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|column| {
            table
                .iter()
                .map(|line| line[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (index, line) in table.iter().enumerate() {
        let mut text = String::new();
        for (column, cell) in line.iter().enumerate() {
            if column + 1 == line.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[column]));
            }
        }
        outln!("{}", text.trim_end());
        if index > 0
            && let Some(note) = rows[index - 1].note()
        {
            outln!("  {note}");
        }
    }
    Ok(())
}

/// One line of `flynn mcp list`.
struct Row {
    name: String,
    transport: String,
    target: String,
    enabled: bool,
    start: &'static str,
    /// In the config here (a daemon may run servers this config lacks).
    configured: bool,
    /// How the daemon's copy is doing, when a daemon was asked.
    live: Option<McpServerStatus>,
    asked: bool,
}

impl Row {
    /// The STATUS column.
    fn state(&self) -> String {
        match &self.live {
            None if !self.enabled => "-".to_owned(),
            None => "not in the daemon".to_owned(),
            Some(live) => match live.phase.as_str() {
                "running" => format!("running, {} tool(s)", live.tools),
                "idle" => "idle (not needed yet)".to_owned(),
                other => other.to_owned(),
            },
        }
    }

    /// A line under the row: why it is failing, or what to do.
    fn note(&self) -> Option<String> {
        let live = match &self.live {
            Some(live) => live,
            None if self.asked && self.enabled => {
                return Some(
                    "the daemon does not run it: restart the daemon so it reads the config"
                        .to_owned(),
                );
            }
            None => return None,
        };
        if !self.configured {
            return Some("the daemon runs it, but this config does not list it".to_owned());
        }
        let error = live.error.as_ref()?;
        Some(match live.retry_in_secs {
            Some(secs) if live.phase == "restarting" => {
                format!(
                    "error: {error} (next attempt in {secs} s, {} restart(s) so far)",
                    live.restarts
                )
            }
            _ => format!("error: {error}"),
        })
    }

    fn json(&self) -> Value {
        let mut out = json!({
            "name": self.name,
            "transport": self.transport,
            "target": self.target,
            "enabled": self.enabled,
            "start": self.start,
        });
        if self.asked {
            out["status"] = self
                .live
                .as_ref()
                .and_then(|live| serde_json::to_value(live).ok())
                .unwrap_or(Value::Null);
        }
        out
    }
}

fn rows(config: &McpConfig, live: Option<&[McpServerStatus]>) -> Vec<Row> {
    let mut rows: BTreeMap<String, Row> = config
        .servers
        .iter()
        .map(|(name, server)| {
            let status = live.and_then(|all| all.iter().find(|s| &s.name == name).cloned());
            let row = Row {
                name: name.clone(),
                transport: server.transport().as_str().to_owned(),
                target: server.target(),
                enabled: server.enabled,
                start: server.start.as_str(),
                configured: true,
                live: status,
                asked: live.is_some(),
            };
            (name.clone(), row)
        })
        .collect();
    for status in live.unwrap_or_default() {
        rows.entry(status.name.clone()).or_insert_with(|| Row {
            name: status.name.clone(),
            transport: status.transport.clone(),
            target: status.target.clone(),
            enabled: true,
            start: status.start.as_str(),
            configured: false,
            live: Some(status.clone()),
            asked: true,
        });
    }
    rows.into_values().collect()
}

fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

async fn tools(config: Option<&Path>, name: &str, json_output: bool) -> Result<(), Failure> {
    let loaded = config::load(config, &CliEnv)?;
    let started = start_configured(&loaded, name).await?;
    let tools = ToolSource::tools(started.server.as_ref());
    if json_output {
        let listed: Vec<Value> = tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name(),
                    "effect": tool.effect().as_str(),
                    "description": tool.description(),
                    "input_schema": tool.input_schema(),
                })
            })
            .collect();
        outln!("{}", Value::Array(listed));
    } else if tools.is_empty() {
        outln!("{name} offers no tools");
    } else {
        let width = tools
            .iter()
            .map(|tool| tool.name().chars().count())
            .max()
            .unwrap_or(0);
        for tool in &tools {
            outln!(
                "{:<width$}  {:<9}  {}",
                tool.name(),
                effect(tool.effect()),
                first_line(tool.description(), 100)
            );
        }
    }
    started.server.stop().await;
    Ok(())
}

async fn test(
    config: Option<&Path>,
    name: &str,
    call: Option<&str>,
    args: Option<&str>,
) -> Result<(), Failure> {
    let loaded = config::load(config, &CliEnv)?;
    let arguments: Value = match args {
        Some(text) => {
            let value: Value = serde_json::from_str(text)
                .map_err(|e| Failure::usage(format!("--args is not JSON: {e}")))?;
            if !value.is_object() {
                return Err(Failure::usage(
                    "--args must be a JSON object, such as '{\"path\": \"notes.md\"}'",
                ));
            }
            value
        }
        None => json!({}),
    };
    let server_config = configured(&loaded, name)?;
    outln!(
        "server:    {name} ({}: {})",
        server_config.transport().as_str(),
        server_config.target()
    );
    let started = start_configured(&loaded, name).await?;
    outln!("handshake: {} ms", started.elapsed.as_millis());
    outln!(
        "name:      {}",
        started.status.server.as_deref().unwrap_or("(not given)")
    );
    let tools = ToolSource::tools(started.server.as_ref());
    outln!("tools:     {}", tools.len());
    let result = match call {
        Some(tool) => call_tool(&loaded, name, &tools, tool, arguments).await,
        None => Ok(()),
    };
    started.server.stop().await;
    result
}

async fn call_tool(
    loaded: &Loaded,
    server: &str,
    tools: &[Arc<dyn Tool>],
    wanted: &str,
    arguments: Value,
) -> Result<(), Failure> {
    let full = if wanted.starts_with(&format!("{server}.")) {
        wanted.to_owned()
    } else {
        format!("{server}.{wanted}")
    };
    let Some(tool) = tools.iter().find(|tool| tool.name() == full) else {
        let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
        return Err(Failure::usage(format!(
            "{server} has no tool '{wanted}' (its tools: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        )));
    };
    outln!("call:      {full} {arguments}");
    let ctx = ToolContext::new(crate::workspace::resolve(loaded).path);
    let begun = Instant::now();
    let result = tokio::time::timeout(tool.timeout(), tool.call(arguments, &ctx)).await;
    let millis = begun.elapsed().as_millis();
    match result {
        Ok(Ok(output)) => {
            outln!("result:    ok in {millis} ms");
            outln!("{output}");
            Ok(())
        }
        Ok(Err(error)) => Err(Failure::other(format!("{error} (after {millis} ms)"))),
        Err(_) => Err(Failure::other(format!(
            "{full} did not answer within {} s (mcp.servers.{server}.timeout_secs)",
            tool.timeout().as_secs()
        ))),
    }
}

/// Whether `server` is a `flynn mcp serve` of this same binary on the
/// same config: a server that would start itself again, and again.
fn serves_itself(server: &McpServerConfig, config_file: Option<&Path>, workspace: &Path) -> bool {
    let Some(command) = &server.command else {
        return false;
    };
    let ours = std::env::current_exe().ok();
    let same_binary = match (Path::new(command).file_name(), &ours) {
        (Some(name), Some(ours)) => ours.file_name() == Some(name),
        _ => false,
    };
    let args: Vec<&str> = server.args.iter().map(String::as_str).collect();
    let serves = args.windows(2).any(|pair| pair == ["mcp", "serve"]);
    if !same_binary || !serves || args.contains(&"--gateway") {
        return false;
    }
    let theirs = args
        .iter()
        .position(|arg| *arg == "--config")
        .and_then(|at| args.get(at + 1))
        .map(|path| {
            let dir = server
                .cwd
                .clone()
                .unwrap_or_else(|| workspace.to_path_buf());
            dir.join(path)
        });
    match (theirs, config_file) {
        (Some(theirs), Some(ours)) => {
            let canonical =
                |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
            canonical(&theirs) == canonical(ours)
        }
        // Without `--config` it reads the default file: count it as the
        // same, to be safe.
        _ => true,
    }
}

async fn serve(config: Option<&Path>, gateway: Option<&str>) -> Result<(), Failure> {
    let named = gateway
        .map(str::to_owned)
        .or_else(|| std::env::var("FLYNN_GATEWAY_URL").ok())
        .filter(|url| !url.trim().is_empty());
    let stop = CancellationToken::new();
    if let Some(address) = named {
        let url = flynn_client::mcp_url(&address).map_err(Failure::usage)?;
        let paths = flynn_core::config::Paths::resolve(config, &CliEnv)?;
        let token = flynn_client::client_token(
            std::env::var("FLYNN_GATEWAY_TOKEN").ok().as_deref(),
            &paths.home,
        );
        let proxied = flynn_core::mcp::serve::proxy_stdio(&url, token.as_deref(), stop.clone());
        return until_signal(proxied, &stop).await.map_err(|error| Failure {
            code: match error {
                flynn_core::mcp::serve::ServeError::Unauthorized { .. }
                | flynn_core::mcp::serve::ServeError::Unreachable { .. } => 4,
                _ => 1,
            },
            message: error.to_string(),
        });
    }

    let loaded = config::load(config, &CliEnv)?;
    let here = crate::workspace::resolve(&loaded).path;
    let mut settings = loaded.config;
    let config_file = match &loaded.source {
        Source::File(path) => Some(path.clone()),
        Source::Environment => None,
    };
    settings.mcp.servers.retain(|name, server| {
        let itself = serves_itself(server, config_file.as_deref(), &here);
        if itself {
            eprintln!(
                "warning: mcp.servers.{name} is this same `flynn mcp serve`; it is left out (it would start itself again and again)"
            );
        }
        !itself
    });
    let flynn = Flynn::builder()
        .config(settings)
        .home(loaded.paths.home)
        .workspace(here)
        .build()
        .await?;
    let host = Arc::new(flynn_core::gateway::McpHost::new(
        flynn.manager().clone(),
        flynn.memory().cloned(),
    ));
    let served = until_signal(
        flynn_core::mcp::serve::serve_stdio(host, stop.clone()),
        &stop,
    )
    .await;
    flynn.shutdown().await;
    if let Some(memory) = flynn.memory() {
        memory.close().await;
    }
    served.map_err(|error| Failure::other(error.to_string()))
}

/// Runs `serving` until it ends; Ctrl-C or SIGTERM cancels `stop`, lets
/// it finish, and counts as a clean stop whatever it then returns.
async fn until_signal<E>(
    serving: impl Future<Output = Result<(), E>>,
    stop: &CancellationToken,
) -> Result<(), E> {
    tokio::pin!(serving);
    tokio::select! {
        result = &mut serving => return result,
        _ = tokio::signal::ctrl_c() => {}
        () = terminate() => {}
    }
    stop.cancel();
    let _ = serving.await;
    Ok(())
}

async fn terminate() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
        return;
    }
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn stdio(command: &str, args: &[&str]) -> McpServerConfig {
        serde_json::from_value(json!({"command": command, "args": args})).unwrap()
    }

    #[test]
    fn a_server_that_is_this_flynn_serving_the_same_config_is_recognised() {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("config.yaml");
        std::fs::write(&ours, "").unwrap();
        let other = dir.path().join("other.yaml");
        std::fs::write(&other, "").unwrap();
        let ours_text = ours.to_str().unwrap();
        let cases = [
            (stdio(exe, &["mcp", "serve", "--config", ours_text]), true),
            (stdio(exe, &["mcp", "serve"]), true),
            (
                stdio(exe, &["mcp", "serve", "--config", other.to_str().unwrap()]),
                false,
            ),
            (
                stdio(exe, &["mcp", "serve", "--gateway", "http://127.0.0.1:1"]),
                false,
            ),
            (stdio(exe, &["mcp", "list"]), false),
            (stdio("npx", &["mcp", "serve"]), false),
        ];
        for (server, expected) in cases {
            assert_eq!(
                serves_itself(&server, Some(&ours), dir.path()),
                expected,
                "{:?}",
                server.args
            );
        }
    }

    #[test]
    fn targets_quote_arguments_with_spaces_and_never_show_headers() {
        let server = stdio("npx", &["-y", "server", "/home/me/My Notes"]);
        assert_eq!(server.target(), "npx -y server '/home/me/My Notes'");
        let http: McpServerConfig = serde_json::from_value(json!({
            "url": "https://mcp.example/mcp",
            "headers": {"Authorization": "Bearer secret"}
        }))
        .unwrap();
        assert_eq!(http.target(), "https://mcp.example/mcp");
    }
}
