//! The CLI's view of the agents (`flynn agent list|show`) and of a running
//! daemon (`flynn gateway status`).

use flynn_testkit::FakeOpenAi;
use serde_json::Value;

use crate::daemon::Daemon;
use crate::setup::TestConfig;
use crate::{Env, stderr, stdout};

#[tokio::test]
async fn agents_are_listed_and_shown_as_the_config_defines_them() {
    let model = FakeOpenAi::start().await;
    let env = Env::new().with_config(&TestConfig::new(&model).section(
        "tools:\n  profile: coding\nagents:\n  default: helper\n  list:\n    - name: helper\n    - name: coder\n      model: openai/gpt-4o\n      tools: {profile: full, autonomy: full, deny: [\"shell.exec\"]}\n      can_delegate: [helper]\n      max_iterations: 30\n  routes:\n    - {channel: telegram, sender: \"42\", agent: coder}",
    ));
    let listed = env.run(&["agent", "list"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_eq!(
        stdout(&listed),
        "helper (default) · default tier (agents.primary_tier) · tools: coding (supervised)\n\
         coder · model openai/gpt-4o (no fallback) · tools: full (full)\n"
    );
    let shown = env.run(&["agent", "show", "coder"]);
    assert_eq!(
        stdout(&shown),
        "coder\n  runs on: model openai/gpt-4o (no fallback)\n  tools: full profile, full autonomy; denied: shell.exec\n  workspace: the default workspace (FLYNN_HOME/workspace)\n  max model calls per turn: 30\n  prompt files: SOUL.md, AGENTS.md\n  guests may pick: none\n  may delegate to: helper\n  routed from: telegram:42\n"
    );
    let json: Value =
        serde_json::from_str(&stdout(&env.run(&["agent", "show", "helper", "--json"]))).unwrap();
    assert_eq!(json["default"], true);
    assert_eq!(json["max_iterations"], 10);
    let missing = env.run(&["agent", "show", "nobody"]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        stderr(&missing).trim(),
        "error: no agent named 'nobody' (agents: helper, coder)"
    );
}

#[tokio::test]
async fn gateway_status_says_what_the_daemon_is_doing_or_that_none_answers() {
    let model = FakeOpenAi::start().await;
    let env = Env::new().with_config(&TestConfig::new(&model));
    let none = env.run(&["gateway", "status", "--gateway", "http://127.0.0.1:9"]);
    assert_eq!(none.status.code(), Some(4), "{}", stdout(&none));
    assert!(
        stderr(&none).contains("cannot reach the daemon at ws://127.0.0.1:9/rpc")
            && stderr(&none).contains("start the daemon with `flynn start`"),
        "{}",
        stderr(&none)
    );

    let daemon = Daemon::start(&env);
    let status = env.run(&["gateway", "status", "--gateway", &daemon.url]);
    assert!(status.status.success(), "{}", stderr(&status));
    let text = stdout(&status);
    let mut lines = text.lines();
    let first = lines.next().unwrap();
    assert!(
        first.starts_with(&format!(
            "Daemon {} at {}: ok, up ",
            env!("CARGO_PKG_VERSION"),
            daemon.url
        )),
        "{text}"
    );
    assert_eq!(
        lines.next(),
        Some("Sessions: 0 active · turns: 0 running, 0 waiting · 0 confirmation(s) waiting")
    );
    assert_eq!(lines.next(), Some("Channels: web connected"), "{text}");
    let json: Value = serde_json::from_str(&stdout(&env.run(&[
        "gateway",
        "status",
        "--json",
        "--gateway",
        &daemon.url,
    ])))
    .unwrap();
    assert_eq!(json["health"]["status"], "ok");
}

#[tokio::test]
async fn the_minimal_tui_is_a_conversation_line_by_line() {
    use std::io::Write;

    use flynn_testkit::Reply;

    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Hello! How can I help?".into()));
    model.push(Reply::Text("You said hello first.".into()));
    let env = Env::new().with_config(&TestConfig::new(&model));
    let mut child = env
        .command(&["tui", "--minimal"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\n\n/status\nwhat did I say first?\n/quit\nnever sent\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("Hello! How can I help?\n"), "{text}");
    assert!(text.contains("tui:default"), "the /status answer: {text}");
    assert!(text.trim_end().ends_with("You said hello first."), "{text}");
    // No colours for a screen reader, and nothing after /quit.
    assert!(!stderr(&output).contains('\u{1b}'), "{}", stderr(&output));
    let asked: Vec<String> = model
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(asked.len(), 2);
    assert!(asked[1].contains("hello") && !asked[1].contains("never sent"));
    let shown = env.run(&["sessions", "show", "tui:default"]);
    assert!(
        stdout(&shown).contains("user: what did I say first?"),
        "{}",
        stdout(&shown)
    );

    // The full screen is flynn-tui's: started when it is there (and it
    // wants a terminal), else named with how to install it.
    let full = env.run(&["tui"]);
    assert_ne!(full.status.code(), Some(0));
    let said = stderr(&full);
    assert!(
        said.contains("flynn-tui needs a terminal")
            || said.contains("cargo install --path bins/flynn-tui"),
        "{said}"
    );
}
