//! Turns a previous process left open: found when the session's lane
//! starts, reported (or rerun), and the history repaired so the session
//! continues.

use flynn_orchestrator::AgentEvent;
use flynn_protocol::config::{InterruptedTurns, SessionsConfig};
use flynn_protocol::{ContentBlock, Message, RecoveryAction, Role};
use flynn_sessions::{TurnOrigin, TurnStatus, Turns};

use crate::{Harness, ScriptedModel, Setup, key, tool_use};

/// The id of a process that has exited (and been reaped).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Leaves, as a killed process would: one turn cut off mid-tool, and one
/// accepted behind it that never started.
async fn crashed_session(h: &Harness, k: &flynn_protocol::SessionKey) -> (u64, u64) {
    let origin = TurnOrigin {
        agent: "main".into(),
        owner_pid: dead_pid(),
        external_id: None,
        principal: Default::default(),
    };
    let cut = h
        .store
        .accept(k, &[ContentBlock::text("run the long job")], &origin)
        .await
        .unwrap();
    h.store.start_turn(cut.id, origin.owner_pid).await.unwrap();
    h.store
        .append_for_turn(k, cut.id, &[tool_use("t1", "sleep 30")])
        .await
        .unwrap();
    let waiting = h
        .store
        .accept(k, &[ContentBlock::text("and then this")], &origin)
        .await
        .unwrap();
    (cut.id.0, waiting.id.0)
}

#[tokio::test]
async fn an_interrupted_session_is_reported_repaired_and_continues() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let k = key("cli:crashed");
    let (cut, waiting) = crashed_session(&h, &k).await;
    let mut events = h.manager.subscribe(&k);
    let (result, _) = h.send(&k, "still there?").await;
    assert_eq!(result.unwrap().reply, "re: still there?");

    let mut reports = Vec::new();
    while reports.len() < 2 {
        if let AgentEvent::Interrupted { turn, action, .. } =
            events.next().await.unwrap().unwrap().event
        {
            reports.push((turn.0, action));
        }
    }
    assert_eq!(
        reports,
        vec![
            (cut, RecoveryAction::Reported),
            (waiting, RecoveryAction::Reported)
        ]
    );
    let note = |text: &str| {
        Message::assistant(format!(
            "⚠ Interrupted: Flynn stopped before it finished answering \"{text}\". Nothing more was done; send the message again if you still want it."
        ))
    };
    let expected = vec![
        Message::user("run the long job"),
        tool_use("t1", "sleep 30"),
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: flynn_context::INTERRUPTED_RESULT.into(),
                is_error: true,
            }],
        },
        note("run the long job"),
        Message::user("and then this"),
        note("and then this"),
        Message::user("still there?"),
        Message::assistant("re: still there?"),
    ];
    assert_eq!(h.history(&k).await, expected);
    // The model saw a history providers accept: every call answered.
    assert_eq!(*model.requests()[0].messages, expected[..7]);
    for turn in [cut, waiting] {
        assert_eq!(
            h.store
                .turn(flynn_protocol::TurnId(turn))
                .await
                .unwrap()
                .map(|t| t.status),
            Some(TurnStatus::Interrupted)
        );
    }
    assert_eq!(h.store.open_turns(None).await.unwrap(), vec![]);
}

#[tokio::test]
async fn with_rerun_the_interrupted_turns_run_again_in_order() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(
        vec![model.clone()],
        Setup {
            sessions: SessionsConfig {
                interrupted_turns: InterruptedTurns::Rerun,
                ..SessionsConfig::default()
            },
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:crashed");
    let (cut, waiting) = crashed_session(&h, &k).await;
    // Start-up recovery, as a daemon does it, without any new message.
    assert_eq!(h.manager.recover().await.unwrap(), vec![k.clone()]);
    let (result, _) = h.send(&k, "third").await;
    assert_eq!(result.unwrap().reply, "re: third");
    let history = h.history(&k).await;
    let texts: Vec<String> = history
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(Message::text)
        .collect();
    // The cut-off turn reran (the model answered after the repaired call:
    // the echo of a message without text), then the one that never
    // started, then the new one.
    assert_eq!(texts, ["", "re: ", "re: and then this", "re: third"]);
    let rerun = &model.requests()[0].messages;
    assert_eq!(
        rerun.last().unwrap().content,
        vec![ContentBlock::ToolResult {
            tool_use_id: "t1".into(),
            content: flynn_context::INTERRUPTED_RESULT.into(),
            is_error: true,
        }]
    );
    for turn in [cut, waiting] {
        assert_eq!(
            h.store
                .turn(flynn_protocol::TurnId(turn))
                .await
                .unwrap()
                .map(|t| t.status),
            Some(TurnStatus::Completed)
        );
    }
}

#[tokio::test]
async fn turns_of_a_live_process_are_left_alone() {
    let h = Harness::new(vec![ScriptedModel::echo("m")], Setup::default()).await;
    let k = key("cli:shared");
    // The parent of this test is alive: another Flynn could be it.
    let live = TurnOrigin {
        agent: "main".into(),
        owner_pid: std::os::unix::process::parent_id(),
        external_id: None,
        principal: Default::default(),
    };
    let other = h
        .store
        .accept(&k, &[ContentBlock::text("theirs")], &live)
        .await
        .unwrap();
    h.store.start_turn(other.id, live.owner_pid).await.unwrap();
    let (result, _) = h.send(&k, "mine").await;
    // The other process's message is in the shared history; its turn is
    // left to it.
    assert_eq!(result.unwrap().reply, "re: theirs mine");
    assert_eq!(
        h.store.turn(other.id).await.unwrap().map(|t| t.status),
        Some(TurnStatus::Running)
    );
}

#[tokio::test]
async fn a_session_that_cannot_be_loaded_at_first_is_loaded_again_and_recovered_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(
        flynn_testkit::store::RealTimeStore::open_at(&dir.path().join("s.db")).await,
    );
    let k = key("cli:flaky");
    let origin = TurnOrigin {
        agent: "main".into(),
        owner_pid: dead_pid(),
        external_id: None,
        principal: Default::default(),
    };
    store
        .accept(&k, &[ContentBlock::text("left waiting")], &origin)
        .await
        .unwrap();
    let model = ScriptedModel::echo("m");
    let clients = std::collections::HashMap::from([(
        "m".to_owned(),
        model.clone() as std::sync::Arc<dyn flynn_models::ModelClient>,
    )]);
    let manager = crate::manager_with(
        dir.path(),
        store.clone(),
        clients,
        Setup {
            sessions: SessionsConfig {
                interrupted_turns: InterruptedTurns::Rerun,
                ..SessionsConfig::default()
            },
            ..Setup::default()
        },
    );
    // The lane's first look at the session fails: the database is busy.
    store.fail_next("metadata", 1);
    let submitted = manager
        .submit(flynn_orchestrator::TurnRequest::text(k.clone(), "newer"))
        .await
        .unwrap();
    let flynn_orchestrator::Submitted::Turn(handle) = submitted else {
        panic!("a turn");
    };
    assert_eq!(handle.outcome().await.unwrap().reply, "re: newer");
    // The recovered turn ran, and before the newer one.
    let asked: Vec<String> = model
        .requests()
        .iter()
        .map(|r| crate::last_user_text(&r.messages))
        .collect();
    assert_eq!(asked, ["left waiting", "newer"]);
    manager.shutdown().await;
}
