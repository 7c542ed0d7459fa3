//! `kill -9` in the middle of a turn loses no accepted message, and the
//! session continues against the strict fakes.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;

use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::{Value, json};

use crate::{Env, stderr, stdout};

fn openai_env(fake: &FakeOpenAi) -> Env {
    Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x")
}

fn shown(env: &Env, session: &str) -> Vec<Value> {
    let output = env.run(&["sessions", "show", "--json", session]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let shown: Value = serde_json::from_str(&stdout(&output)).unwrap();
    shown["messages"].as_array().unwrap().clone()
}

const NOTE_START: &str = "⚠ Interrupted: Flynn stopped before it finished answering";

#[tokio::test]
async fn killed_mid_tool_the_session_is_repaired_and_continues() {
    let fake = FakeOpenAi::start().await;
    let env = openai_env(&fake);
    // Run from the home directory, tools work in FLYNN_HOME/workspace.
    let pid_file = env.path().join("home/workspace/tool.pid");
    let command = "echo $$ > tool.pid; exec sleep 30".to_owned();
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({ "command": command }),
    )]));
    let mut child = env
        .command(&["send", "--yes", "--session", "cli:crash", "run the job"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("→ shell.exec"), "{first}");
    // The tool is running: its process wrote its id.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let tool_pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && !text.trim().is_empty()
        {
            break text.trim().to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The orphaned tool is not Flynn's business any more; end it here.
    let _ = std::process::Command::new("kill")
        .args(["-9", &tool_pid])
        .status();

    fake.push(Reply::Text("Yes, still here.".into()));
    let output = env.run(&["send", "--session", "cli:crash", "are you there?"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Yes, still here.\n");
    assert_eq!(
        stderr(&output),
        "warning: an earlier turn in cli:crash (\"run the job\") was interrupted before it finished; its message is kept in the history\n"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());

    let messages = shown(&env, "cli:crash");
    let kinds: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            let block = &m["content"][0];
            let kind = block["type"].as_str().unwrap().to_owned();
            let text: String = block["text"]
                .as_str()
                .or(block["content"].as_str())
                .unwrap_or_default()
                .chars()
                .take(20)
                .collect();
            (
                m["role"].as_str().unwrap().to_owned(),
                format!("{kind}: {text}"),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("user".into(), "text: run the job".into()),
            ("assistant".into(), "tool_use: ".into()),
            ("user".into(), "tool_result: interrupted: the too".into()),
            ("assistant".into(), "text: ⚠ Interrupted: Flynn".into()),
            ("user".into(), "text: are you there?".into()),
            ("assistant".into(), "text: Yes, still here.".into()),
        ]
    );
    assert!(
        messages[3]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with(NOTE_START)
    );
}

#[tokio::test]
async fn killed_mid_stream_the_message_is_kept_and_the_session_continues() {
    let fake = FakeOpenAi::start().await;
    let env = openai_env(&fake);
    fake.push(Reply::Stall(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n".into(),
    ));
    let mut child = env
        .command(&["send", "--session", "cli:stream", "tell me a story"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The answer is streaming once its first piece reached stdout.
    let mut stdout_pipe = child.stdout.take().unwrap();
    let mut seen = [0u8; 3];
    stdout_pipe.read_exact(&mut seen).unwrap();
    assert_eq!(&seen, b"Hel");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    fake.push(Reply::Text("Once upon a time.".into()));
    let output = env.run(&["send", "--json", "--session", "cli:stream", "go on"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(reply["reply"], "Once upon a time.");
    assert_eq!(fake.violations(), Vec::<String>::new());
    // The killed turn's message was sent again, with the note after it.
    let sent = &fake.requests()[1].body["messages"];
    let roles: Vec<(&str, &str)> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(roles[0], ("user", "tell me a story"));
    assert!(roles[1].1.starts_with(NOTE_START), "{roles:?}");
    assert_eq!(roles[2], ("user", "go on"));

    let messages = shown(&env, "cli:stream");
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[0]["content"][0]["text"], "tell me a story");
    assert_eq!(messages[3]["content"][0]["text"], "Once upon a time.");
}
