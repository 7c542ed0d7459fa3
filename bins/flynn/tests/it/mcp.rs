//! MCP both ways through the real binary: `flynn mcp serve` driven by a
//! real MCP client over stdio (flynn-mcp's rmcp client), the daemon's
//! `/mcp` behind its token, `flynn mcp serve --gateway` sharing the
//! daemon's sessions, and `flynn mcp list|tools|test` and `flynn doctor`
//! on a config whose stdio server is `flynn mcp serve` itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_core::mcp::{McpServer, Phase};
use flynn_core::protocol::ToolEffect;
use flynn_core::protocol::config::McpServerConfig;
use flynn_core::tools::ToolSource;
use flynn_core::{Tool, ToolContext};
use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::{Env, stderr, stdout};

const FLYNN: &str = env!("CARGO_BIN_EXE_flynn");
const BROKEN: &str = "/nonexistent/mcp-server";

/// The config of the Flynn that `flynn mcp serve` runs: the fake model.
fn served_config(env: &Env, fake: &FakeOpenAi) -> PathBuf {
    let file = env.path().join("served.yaml");
    std::fs::write(
        &file,
        format!(
            "providers:\n  fake: {{ kind: openai, base_url: \"{}\", api_key: sk-x }}\n\
             models:\n  tiers:\n    default: [fake/gpt-4o-mini]\n",
            fake.base_url()
        ),
    )
    .unwrap();
    file
}

/// A config whose MCP servers are `self` (`flynn mcp serve` of the served
/// config), `broken` (a program that does not exist) and `remote` (off).
fn client_config(env: &Env, fake: &FakeOpenAi, file: &Path) -> PathBuf {
    let served = served_config(env, fake);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        file,
        format!(
            "providers:\n  fake: {{ kind: openai, base_url: \"{base}\", api_key: sk-x }}\n\
             models:\n  tiers:\n    default: [fake/gpt-4o-mini]\n\
             gateway:\n  bind: 127.0.0.1:{port}\n\
             mcp:\n  servers:\n\
             \x20   self:\n      command: {FLYNN}\n      args: [mcp, serve, --config, {served}]\n      trusted: true\n\
             \x20     env: {{ FLYNN_HOME: {home} }}\n\
             \x20   broken:\n      command: {BROKEN}\n      args: [--port, \"1\"]\n\
             \x20   remote:\n      url: http://127.0.0.1:9/mcp\n      start: lazy\n      enabled: false\n",
            base = fake.base_url(),
            served = served.display(),
            home = env.path().join("served-home").display(),
        ),
    )
    .unwrap();
    served
}

/// `flynn mcp serve` with these arguments, as a stdio MCP server.
fn flynn_server(args: &[&str], env: &[(&str, &str)]) -> McpServerConfig {
    let env: serde_json::Map<String, Value> = env
        .iter()
        .map(|(key, value)| ((*key).to_owned(), json!(value)))
        .collect();
    // Flynn itself: its hints are believed.
    serde_json::from_value(json!({"command": FLYNN, "args": args, "env": env, "trusted": true}))
        .unwrap()
}

async fn started(server: &Arc<McpServer>) {
    server.ready().await;
    let status = server.status();
    assert_eq!(
        (status.phase, status.server.clone(), status.tools),
        (
            Phase::Running,
            Some(format!("flynn {}", env!("CARGO_PKG_VERSION"))),
            5
        ),
        "{:?}; stderr: {:?}",
        status.error,
        server.stderr_tail()
    );
}

/// Calls `<server>.<tool>` the way the runtime does: its text, or the
/// error the model would be told.
async fn call(server: &Arc<McpServer>, tool: &str, args: Value) -> Result<String, String> {
    let tools: Vec<Arc<dyn Tool>> = ToolSource::tools(server.as_ref());
    let name = format!("{}.{tool}", server.name());
    let tool = tools
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"));
    tool.call(args, &ToolContext::new(std::env::temp_dir()))
        .await
        .map_err(|e| e.to_string())
}

fn parsed(text: Result<String, String>) -> Value {
    serde_json::from_str(&text.unwrap()).unwrap()
}

/// `(role, text)` of each message `read_history` returned.
fn conversation(history: &Value) -> Vec<(String, String)> {
    history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn mcp_serve_answers_a_real_mcp_client_on_stdio() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = Env::new();
    let served = served_config(&env, &fake);
    let home = env.path().join("served-home");
    std::fs::create_dir_all(home.join("memory")).unwrap();
    std::fs::write(
        home.join("memory/user.md"),
        "# User\n\nThe user's cat is called Miso.\n",
    )
    .unwrap();
    let server = McpServer::new(
        "flynn",
        flynn_server(
            &["mcp", "serve", "--config", served.to_str().unwrap()],
            &[("FLYNN_HOME", home.to_str().unwrap())],
        ),
        env.path(),
    );
    started(&server).await;
    let tools: Vec<(String, ToolEffect)> = ToolSource::tools(server.as_ref())
        .iter()
        .map(|t| (t.name().to_owned(), t.effect()))
        .collect();
    assert_eq!(
        tools,
        [
            ("flynn.list_agents".to_owned(), ToolEffect::ReadOnly),
            ("flynn.list_sessions".to_owned(), ToolEffect::ReadOnly),
            ("flynn.read_history".to_owned(), ToolEffect::ReadOnly),
            ("flynn.search_memory".to_owned(), ToolEffect::ReadOnly),
            ("flynn.send_message".to_owned(), ToolEffect::External),
        ]
    );

    fake.push(Reply::Text("Hello over MCP.".into()));
    let reply = call(&server, "send_message", json!({"message": "hello"})).await;
    assert_eq!(reply.as_deref(), Ok("Hello over MCP."));
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": "hello"})
    );

    // The session it went to, and what is in it.
    let listed = parsed(call(&server, "list_sessions", json!({})).await);
    let sessions: Vec<(&str, u64)> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_str().unwrap(),
                s["messages"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sessions, [("mcp:default", 2)]);
    let history = parsed(call(&server, "read_history", json!({"session": "mcp:default"})).await);
    assert_eq!(
        conversation(&history),
        [
            ("user".to_owned(), "hello".to_owned()),
            ("assistant".to_owned(), "Hello over MCP.".to_owned())
        ]
    );
    assert_eq!(history["more_before"], false);

    // Memory, from the served Flynn's FLYNN_HOME.
    let found = parsed(call(&server, "search_memory", json!({"query": "Miso"})).await);
    assert_eq!(found["hits"][0]["file"], "user.md");
    assert!(
        found["hits"][0]["text"]
            .as_str()
            .unwrap()
            .contains("The user's cat is called Miso."),
        "{found}"
    );

    // Mistakes are explained, naming what exists; nothing reaches the model.
    assert_eq!(
        call(&server, "read_history", json!({"session": "web:nobody"})).await,
        Err("flynn.read_history reported an error: Flynn has no session 'web:nobody'; the most recent are: mcp:default (list_sessions lists them all)".to_owned())
    );
    assert_eq!(
        call(
            &server,
            "send_message",
            json!({"message": "hi", "agent": "ghost"})
        )
        .await,
        Err(
            "flynn.send_message reported an error: Flynn has no agent 'ghost'; its agents are: main"
                .to_owned()
        )
    );
    assert_eq!(fake.requests().len(), 1);

    // Unattended: a tool call that needs confirmation is denied, and the
    // model is told why.
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": "echo ran > ran.txt"}),
    )]));
    fake.push(Reply::Text("I could not run it.".into()));
    let reply = call(
        &server,
        "send_message",
        json!({"message": "run it", "session": "mcp:tools"}),
    )
    .await;
    assert_eq!(reply.as_deref(), Ok("I could not run it."));
    let requests = fake.requests();
    let result = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(result["role"], "tool");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("a message sent over MCP has nobody to ask"),
        "{result}"
    );
    assert!(!env.path().join("ran.txt").exists());
    assert_eq!(fake.violations(), Vec::<String>::new());
    server.stop().await;
}

#[tokio::test]
async fn the_daemon_serves_mcp_behind_its_token_and_reports_its_mcp_servers() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = Env::new();
    // The daemon reads the default config file (XDG_CONFIG_HOME).
    let config = env.path().join("config/flynn/config.yaml");
    let served = client_config(&env, &fake, &config);
    let daemon = Daemon::start(&env);
    let url = format!("{}/mcp", daemon.url);

    // Without the token, or with a wrong one: 401, as on /rpc.
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}
    });
    let http = reqwest::Client::new();
    for token in [None, Some("wrong-token")] {
        let mut request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "token {token:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
    }

    // With it: a real MCP client over streamable HTTP.
    let token = std::fs::read_to_string(env.path().join("home/gateway.token")).unwrap();
    let token = token.trim();
    let remote: McpServerConfig = serde_json::from_value(json!({
        "url": url,
        "bearer_token": token,
    }))
    .unwrap();
    let remote = McpServer::new("daemon", remote, env.path());
    started(&remote).await;
    fake.push(Reply::Text("Hello from the daemon over MCP.".into()));
    let reply = call(
        &remote,
        "send_message",
        json!({"message": "hi daemon", "session": "mcp:shared"}),
    )
    .await;
    assert_eq!(reply.as_deref(), Ok("Hello from the daemon over MCP."));
    remote.stop().await;

    // `flynn mcp serve --gateway` serves the daemon's sessions on stdio.
    let proxy = McpServer::new(
        "proxy",
        flynn_server(
            &["mcp", "serve", "--gateway", &daemon.url],
            &[("FLYNN_GATEWAY_TOKEN", token)],
        ),
        env.path(),
    );
    started(&proxy).await;
    let history = parsed(call(&proxy, "read_history", json!({"session": "mcp:shared"})).await);
    assert_eq!(
        conversation(&history),
        [
            ("user".to_owned(), "hi daemon".to_owned()),
            (
                "assistant".to_owned(),
                "Hello from the daemon over MCP.".to_owned()
            )
        ]
    );
    proxy.stop().await;

    // The daemon's own MCP servers, as `mcp.status` reports them.
    let header = "NAME    TRANSPORT  ENABLED  START  STATUS              TARGET";
    let expected_rows = [
        format!("broken  stdio      yes      boot   restarting          {BROKEN} --port 1"),
        "remote  http       no       lazy   -                   http://127.0.0.1:9/mcp".to_owned(),
        format!(
            "self    stdio      yes      boot   running, 5 tool(s)  {FLYNN} mcp serve --config {}",
            served.display()
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let lines = loop {
        let output = env.run(&["mcp", "list", "--gateway", &daemon.url]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let text = stdout(&output);
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() == 5 && lines[1] == expected_rows[0] && lines[4] == expected_rows[2] {
            break lines;
        }
        assert!(
            Instant::now() < deadline,
            "the servers did not settle:\n{text}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lines[0], header);
    assert_eq!(lines[1], expected_rows[0]);
    assert!(
        lines[2].starts_with(&format!(
            "  error: cannot start '{BROKEN}': not found (is it installed and on PATH"
        )),
        "{lines:?}"
    );
    assert!(lines[2].contains("next attempt in"), "{lines:?}");
    assert_eq!(lines[3], expected_rows[1]);
    assert_eq!(lines[4], expected_rows[2]);

    let output = env.run(&["mcp", "list", "--json", "--gateway", &daemon.url]);
    let listed: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let status = &listed[2]["status"];
    assert_eq!(
        (
            status["phase"].as_str(),
            status["tools"].as_u64(),
            status["server"].as_str(),
            status["start"].as_str()
        ),
        (
            Some("running"),
            Some(5),
            Some(format!("flynn {}", env!("CARGO_PKG_VERSION")).as_str()),
            Some("boot")
        )
    );
    assert_eq!(
        listed[1]["status"],
        Value::Null,
        "disabled: not in the daemon"
    );
}

#[tokio::test]
async fn mcp_list_tools_and_test_start_a_configured_stdio_server() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = Env::new();
    let config = env.path().join("flynn.yaml");
    let served = client_config(&env, &fake, &config);
    let file = config.to_str().unwrap();

    let output = env.run(&["mcp", "list", "--config", file]);
    assert_eq!(
        (output.status.code(), stdout(&output), stderr(&output)),
        (
            Some(0),
            format!(
                "NAME    TRANSPORT  ENABLED  START  TARGET\n\
                 broken  stdio      yes      boot   {BROKEN} --port 1\n\
                 remote  http       no       lazy   http://127.0.0.1:9/mcp\n\
                 self    stdio      yes      boot   {FLYNN} mcp serve --config {}\n",
                served.display()
            ),
            String::new()
        )
    );

    let output = env.run(&["mcp", "tools", "self", "--config", file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let listed: Vec<(String, String, bool)> = stdout(&output)
        .lines()
        .map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next().unwrap().to_owned();
            let effect = words.next().unwrap().to_owned();
            (name, effect, words.next().is_some())
        })
        .collect();
    let expected: Vec<(String, String, bool)> = [
        ("self.list_agents", "read-only"),
        ("self.list_sessions", "read-only"),
        ("self.read_history", "read-only"),
        ("self.search_memory", "read-only"),
        ("self.send_message", "external"),
    ]
    .iter()
    .map(|(name, effect)| ((*name).to_owned(), (*effect).to_owned(), true))
    .collect();
    assert_eq!(listed, expected);

    fake.push(Reply::Text("Tested.".into()));
    let output = env.run(&[
        "mcp",
        "test",
        "self",
        "--config",
        file,
        "--call",
        "send_message",
        "--args",
        r#"{"message": "are you there?"}"#,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines: Vec<String> = stdout(&output)
        .lines()
        .map(|line| {
            if line.starts_with("handshake: ") {
                "handshake: N ms".to_owned()
            } else if line.starts_with("result:    ok in ") {
                "result:    ok in N ms".to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert_eq!(
        lines,
        [
            format!(
                "server:    self (stdio: {FLYNN} mcp serve --config {})",
                served.display()
            ),
            "handshake: N ms".to_owned(),
            format!("name:      flynn {}", env!("CARGO_PKG_VERSION")),
            "tools:     5".to_owned(),
            r#"call:      self.send_message {"message":"are you there?"}"#.to_owned(),
            "result:    ok in N ms".to_owned(),
            "Tested.".to_owned(),
        ]
    );
    assert_eq!(fake.requests().len(), 1);

    // A tool it does not have, a server that is not configured: usage
    // errors naming what there is.
    let output = env.run(&["mcp", "test", "self", "--config", file, "--call", "nope"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "error: self has no tool 'nope' (its tools: self.list_agents, self.list_sessions, self.read_history, self.search_memory, self.send_message)\n"
    );
    let output = env.run(&["mcp", "tools", "nope", "--config", file]);
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (
            Some(2),
            format!("error: no MCP server 'nope' in {file} (configured: broken, remote, self)\n")
        )
    );
}

#[tokio::test]
async fn a_server_that_cannot_start_fails_with_why_and_doctor_reports_each_server() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = Env::new();
    let config = env.path().join("flynn.yaml");
    client_config(&env, &fake, &config);
    let file = config.to_str().unwrap();

    for command in ["test", "tools"] {
        let output = env.run(&["mcp", command, "broken", "--config", file]);
        assert_eq!(output.status.code(), Some(1), "{command}");
        let message = stderr(&output);
        assert!(
            message.starts_with(&format!(
                "error: MCP server 'broken' did not start: cannot start '{BROKEN}': not found"
            )),
            "{command}: {message}"
        );
        assert!(
            message.ends_with(&format!(
                "\ncheck mcp.servers.broken (stdio: {BROKEN} --port 1)\n"
            )),
            "{command}: {message}"
        );
    }

    let output = env.run(&["doctor", "--json", "--config", file]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let checks: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let mcp: Vec<(String, String, String)> = checks
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "mcp")
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_owned(),
                c["message"].as_str().unwrap().to_owned(),
                c["fix"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(mcp.len(), 3, "{mcp:?}");
    assert_eq!(mcp[0].0, "fail");
    assert!(
        mcp[0]
            .1
            .starts_with(&format!("broken: cannot start '{BROKEN}': not found")),
        "{mcp:?}"
    );
    assert_eq!(
        mcp[0].2,
        format!(
            "check that `{BROKEN} --port 1` runs here (`flynn mcp test broken` shows what it wrote to stderr) and correct mcp.servers.broken"
        )
    );
    assert_eq!(
        (mcp[1].0.as_str(), mcp[1].1.as_str()),
        (
            "ok",
            "remote: turned off (mcp.servers.remote.enabled), not checked"
        )
    );
    assert_eq!(mcp[2].0, "ok");
    assert!(
        mcp[2].1.starts_with(&format!(
            "self: 5 tool(s) from flynn {} in ",
            env!("CARGO_PKG_VERSION")
        )),
        "{mcp:?}"
    );
}
