use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::{Value, json};

use crate::{Env, stderr, stdout};

#[tokio::test]
async fn sessions_list_show_and_reset_reflect_what_was_said() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hi there.".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let sent = env.run(&["send", "--session", "cli:notes", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));

    let listed = env.run(&["sessions", "list", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["session"], "cli:notes");
    assert_eq!(listed[0]["messages"], 2);

    let shown = env.run(&["sessions", "show", "cli:notes"]);
    assert_eq!(stdout(&shown), "user: hello\nassistant: Hi there.\n");
    let shown = env.run(&["sessions", "show", "--json", "cli:notes"]);
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(
        shown,
        json!({"session": "cli:notes", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello"}], "principal": "owner"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hi there."}]},
        ]})
    );

    let reset = env.run(&["sessions", "reset", "cli:notes"]);
    assert_eq!(stdout(&reset), "reset cli:notes\n");
    let listed = env.run(&["sessions", "list"]);
    assert_eq!(stdout(&listed), "no sessions yet\n");
    let missing = env.run(&["sessions", "show", "cli:notes"]);
    assert_eq!(
        (missing.status.code(), stderr(&missing).as_str()),
        (Some(1), "error: no session cli:notes\n")
    );
}

#[tokio::test]
async fn a_guests_message_says_who_sent_it() {
    use flynn_core::protocol::{ContentBlock, Principal};
    use flynn_core::sessions::TurnOrigin;
    use flynn_core::{SqliteStore, Turns};

    let env = Env::new()
        .var("OPENAI_BASE_URL", "http://127.0.0.1:9")
        .var("OPENAI_API_KEY", "sk-x");
    assert_eq!(env.run(&["sessions", "list"]).status.code(), Some(0));
    let store = SqliteStore::open(&env.path().join("home/sessions.db"))
        .await
        .unwrap();
    let key = "telegram:7".parse().unwrap();
    let record = store
        .accept(
            &key,
            &[ContentBlock::text("hello from a guest")],
            &TurnOrigin {
                agent: "main".into(),
                owner_pid: 1,
                external_id: None,
                principal: Principal::guest("telegram", "7"),
            },
        )
        .await
        .unwrap();
    store.start_turn(record.id, 1).await.unwrap();
    store.close().await;

    let shown = env.run(&["sessions", "show", "telegram:7"]);
    assert_eq!(stdout(&shown), "guest:telegram:7: hello from a guest\n");
    let shown = env.run(&["sessions", "show", "--json", "telegram:7"]);
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(shown["messages"][0]["principal"], "guest:telegram:7");
}

/// `flynn ... | head -1` closes stdout early: Flynn must not panic or abort.
#[tokio::test]
async fn a_closed_stdout_is_not_a_crash() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("an answer nobody reads".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    for args in [
        &["send", "hello"][..],
        &["sessions", "list"][..],
        &["sessions", "show", "cli:default"][..],
        &["config", "schema"][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = env
            .command(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            !stderr(&output).contains("panicked"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[tokio::test]
async fn sessions_are_listed_with_the_title_their_first_message_gave_them() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Let's see.".into()));
    fake.push(Reply::Text("Sure.".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let sent = env.run(&[
        "send",
        "--session",
        "cli:trip",
        "plan the trip to Lyon\nwith the train times, please",
    ]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    let sent = env.run(&["send", "--session", "cli:trip", "and a hotel"]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));

    let listed = env.run(&["sessions", "list", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert_eq!(
        (&listed[0]["session"], &listed[0]["title"]),
        (&json!("cli:trip"), &json!("plan the trip to Lyon"))
    );
    let text = stdout(&env.run(&["sessions", "list"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], "SESSION   MESSAGES  UPDATED               TITLE");
    assert!(
        lines[1].starts_with("cli:trip         4  ")
            && lines[1].ends_with("Z  plan the trip to Lyon"),
        "{text}"
    );
}
