//! The daemon as a process (`flynn start`, the same code as `flynn-daemon`)
//! and the CLI driving it: the same output and exit codes as embedded
//! mode, refusals, SIGTERM mid-turn and `kill -9` mid-turn.

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flynn_testkit::{FakeOpenAi, INPUT_TOKENS, OUTPUT_TOKENS, Reply};
use serde_json::{Value, json};

use crate::{Env, stderr, stdout};

/// A partial answer, then silence: the model is still "thinking".
const STALLED: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"working on it\"},\"finish_reason\":null}]}\n\n";

fn openai_env(fake: &FakeOpenAi) -> Env {
    Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x")
}

/// A running `flynn start` and the lines it has logged so far.
pub(crate) struct Daemon {
    child: Child,
    pub(crate) url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    pub(crate) fn start(env: &Env) -> Daemon {
        Self::start_with(env, &[])
    }

    pub(crate) fn start_with(env: &Env, extra: &[&str]) -> Daemon {
        let mut args = vec!["start", "--bind", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Self::spawn(env.command(&args))
    }

    /// Runs `command` (a `flynn start`, perhaps wrapped) and waits for it
    /// to listen.
    pub(crate) fn spawn(mut command: std::process::Command) -> Daemon {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split_once("listening on http://").map(|(_, r)| r) {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(format!("http://{addr}"));
                }
                lines.lock().unwrap().push(line);
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the daemon did not start: {:?}",
                    log.lock().unwrap().clone()
                );
            }
        };
        Daemon { child, url, log }
    }

    #[cfg_attr(not(all(feature = "telegram", feature = "whatsapp")), allow(dead_code))]
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM, then waits for the exit, at most `limit`.
    #[cfg_attr(
        not(any(target_os = "linux", all(feature = "telegram", feature = "whatsapp"))),
        allow(dead_code)
    )]
    pub(crate) fn stop(&mut self, limit: Duration) -> ExitStatus {
        self.signal("TERM");
        self.wait(limit)
    }

    pub(crate) fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit, at most `limit`.
    pub(crate) fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the daemon did not exit in {limit:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the fake has received `count` requests.
fn wait_for_requests(fake: &FakeOpenAi, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.requests().len() < count {
        assert!(Instant::now() < deadline, "the model was never called");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn send_sessions_and_usage_through_the_daemon_print_what_embedded_mode_prints() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = openai_env(&fake);
    let daemon = Daemon::start(&env);

    fake.push(Reply::Text("Hello from the daemon.".into()));
    let output = env.run(&["send", "--gateway", &daemon.url, "hello"]);
    assert_eq!(
        (
            output.status.code(),
            stdout(&output).as_str(),
            stderr(&output).as_str()
        ),
        (Some(0), "Hello from the daemon.\n", "")
    );

    // FLYNN_GATEWAY_URL does what --gateway does; --json has the
    // embedded shape.
    fake.push(Reply::Text("Second answer.".into()));
    let env = env.var("FLYNN_GATEWAY_URL", &daemon.url);
    let output = env.run(&["send", "--json", "again"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        reply,
        json!({
            "reply": "Second answer.",
            "session": "cli:default",
            "provider": "openai",
            "model": "gpt-4o-mini",
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
            "tool_calls": [],
            "cost_usd": reply["cost_usd"],
        })
    );
    assert!(reply["cost_usd"].as_f64().unwrap() > 0.0, "{reply}");
    // The second request carried the first exchange: the daemon kept it.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let contents: Vec<&str> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.ends_with(&["hello", "Hello from the daemon.", "again"]),
        "{contents:?}"
    );

    // sessions and usage read through the daemon match the database.
    let remote = env.run(&["sessions", "list", "--json"]);
    assert_eq!(remote.status.code(), Some(0), "{}", stderr(&remote));
    let listed: Value = serde_json::from_str(&stdout(&remote)).unwrap();
    assert_eq!(listed[0]["session"], "cli:default");
    assert_eq!(listed[0]["messages"], 4);
    let remote_show = env.run(&["sessions", "show", "cli:default"]);
    assert_eq!(
        stdout(&remote_show),
        "user: hello\nassistant: Hello from the daemon.\nuser: again\nassistant: Second answer.\n"
    );
    let usage = env.run(&["usage", "--json"]);
    assert_eq!(usage.status.code(), Some(0), "{}", stderr(&usage));
    let usage: Value = serde_json::from_str(&stdout(&usage)).unwrap();
    assert_eq!(usage["tiers"]["default"]["calls"], 2);
    assert_eq!(usage["tiers"]["default"]["input_tokens"], 2 * INPUT_TOKENS);
    assert_eq!(usage["purposes"][0]["purpose"], "conversation");
    let table = env.run(&["usage"]);
    assert!(
        stdout(&table).starts_with("TIER     PURPOSE             CALLS"),
        "{}",
        stdout(&table)
    );
    let reset = env.run(&["sessions", "reset", "cli:default"]);
    assert_eq!(stdout(&reset), "reset cli:default\n");
    let empty = env.run(&["sessions", "list"]);
    assert_eq!(stdout(&empty), "no sessions yet\n");

    // An unknown agent is a usage error, as in embedded mode.
    let unknown = env.run(&["send", "--agent", "nobody", "hi"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(stderr(&unknown).contains("nobody"), "{}", stderr(&unknown));
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_wrong_token_and_an_unreachable_daemon_exit_4() {
    let fake = FakeOpenAi::start().await;
    let env = openai_env(&fake);
    let daemon = Daemon::start(&env);

    let wrong = openai_env(&fake).var("FLYNN_GATEWAY_TOKEN", "not-the-token");
    for args in [
        &["send", "--gateway", &daemon.url, "hi"][..],
        &["sessions", "list", "--gateway", &daemon.url],
        &["usage", "--gateway", &daemon.url],
    ] {
        let output = wrong.run(args);
        assert_eq!(
            output.status.code(),
            Some(4),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("refused the token"),
            "{args:?}: {}",
            stderr(&output)
        );
    }

    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("http://127.0.0.1:{port}");
    for args in [
        &["send", "--gateway", &nowhere, "hi"][..],
        &["sessions", "list", "--gateway", &nowhere],
    ] {
        let output = env.run(args);
        assert_eq!(
            output.status.code(),
            Some(4),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).starts_with(&format!(
                "error: cannot reach the daemon at ws://127.0.0.1:{port}/rpc"
            )),
            "{}",
            stderr(&output)
        );
    }
    let output = env.run(&["send", "--json", "--gateway", "ftp://x", "hi"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("scheme 'ftp'"),
        "{}",
        stderr(&output)
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn killed_mid_turn_the_restarted_daemon_keeps_the_message_and_continues() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(STALLED.into()));
    let env = openai_env(&fake);
    let mut daemon = Daemon::start(&env);
    let client = env
        .command(&[
            "send",
            "--gateway",
            &daemon.url,
            "--session",
            "web:crash",
            "write the report",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_requests(&fake, 1);
    daemon.signal("KILL");
    let status = daemon.wait(Duration::from_secs(10));
    assert_eq!(status.code(), None, "killed by a signal");
    // The client learns that the daemon went away.
    let output = client.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot reach the daemon"),
        "{}",
        stderr(&output)
    );
    // Without the daemon's lane, the session with an unfinished turn is
    // not emptied under it.
    let reset = env.run(&["sessions", "reset", "web:crash"]);
    assert_eq!(reset.status.code(), Some(4), "{}", stderr(&reset));
    assert!(
        stderr(&reset).contains("session web:crash has 1 unfinished turns"),
        "{}",
        stderr(&reset)
    );

    let daemon = Daemon::start(&env);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().contains("unfinished") {
        assert!(Instant::now() < deadline, "{}", daemon.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    fake.push(Reply::Text("Here is the report.".into()));
    let output = env.run(&[
        "send",
        "--gateway",
        &daemon.url,
        "--session",
        "web:crash",
        "are you there?",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Here is the report.\n");

    // The accepted message reached the model again with the new one.
    let requests = fake.requests();
    let texts: Vec<String> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        texts[0..texts.len() - 1]
            .iter()
            .any(|t| t.contains("write the report")),
        "{texts:?}"
    );
    let shown = env.run(&[
        "sessions",
        "show",
        "--json",
        "--gateway",
        &daemon.url,
        "web:crash",
    ]);
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(
        messages[0]["content"][0]["text"], "write the report",
        "{shown}"
    );
    assert!(
        messages[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Interrupted"),
        "{shown}"
    );
    assert_eq!(
        messages.last().unwrap()["content"][0]["text"],
        "Here is the report."
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn sigterm_mid_turn_cancels_at_the_deadline_keeps_the_message_and_exits_0() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(STALLED.into()));
    let env = openai_env(&fake);
    let config = env.path().join("flynn.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  openai: {{ kind: openai-compatible, base_url: \"{}\" }}\n\
             models:\n  tiers:\n    default: [openai/gpt-4o-mini]\n\
             gateway:\n  shutdown_grace_secs: 1\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let mut daemon = Daemon::start_with(&env, &["--config", config]);
    let client = env
        .command(&[
            "send",
            "--gateway",
            &daemon.url,
            "--session",
            "web:term",
            "a long job",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_requests(&fake, 1);
    let signalled = Instant::now();
    daemon.signal("TERM");

    // While draining, a new message is refused with exit 4.
    let refused = env.run(&["send", "--gateway", &daemon.url, "one more"]);
    let status = daemon.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
    assert!(
        signalled.elapsed() >= Duration::from_secs(1),
        "the running turn had its grace period"
    );
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));

    // The turn was cancelled at the deadline: the client says so.
    let output = client.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));

    // The accepted message is kept; the refused one was never stored.
    let shown = env.run(&["sessions", "show", "--json", "--config", config, "web:term"]);
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"][0]["text"], "a long job", "{shown}");
    let listed = env.run(&["sessions", "list", "--json", "--config", config]);
    let listed: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// Whether `GET /healthz` at `addr` answers 200.
fn healthy(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0_u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

#[tokio::test]
async fn sigterm_as_soon_as_the_gateway_answers_shuts_down_cleanly() {
    // The gateway answers from worker threads while start-up finishes:
    // a SIGTERM right then must stop the daemon, exit 0, not kill it.
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = openai_env(&fake);
    for _ in 0..10 {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let mut child = env
            .command(&["start", "--bind", &addr.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(addr) {
            assert!(Instant::now() < deadline, "/healthz never answered");
            assert!(child.try_wait().unwrap().is_none(), "the daemon exited");
            std::thread::sleep(Duration::from_micros(100));
        }
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the daemon did not stop");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(status.code(), Some(0), "{status}");
    }
}
