//! Lanes: ordering within a session, concurrency across sessions, the
//! queue, cancellation, idle lanes, and the event streams.

use std::sync::Arc;
use std::time::Duration;

use flynn_orchestrator::{AgentEvent, Error, Followed, SESSION_CAPACITY, Submitted, TurnRequest};
use flynn_protocol::config::{SandboxConfig, SandboxMode, ToolsConfig};
use flynn_protocol::{Message, RunState};
use flynn_sessions::{Conversations, TurnStatus, Turns};
use tokio::sync::Semaphore;

use crate::{Harness, Script, ScriptedModel, Setup, drain_turn, key, tool_use};

/// Whether a process has exited (a zombie counts: it runs no more).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_sessions_run_concurrently_and_each_stays_in_order() {
    // Long enough for other sessions' calls to arrive meanwhile.
    let model = ScriptedModel::builder("m")
        .delay(Duration::from_millis(20))
        .build();
    let dir = tempfile::tempdir().unwrap();
    let (manager, store) = crate::with_model(dir.path(), model.clone()).await;

    // Three messages per session, each sent from its own task, all at once.
    const SESSIONS: usize = 100;
    const MESSAGES: usize = 3;
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..SESSIONS {
        for m in 0..MESSAGES {
            let manager = manager.clone();
            tasks.spawn(async move {
                let k = key(&format!("test:s{s}"));
                let Submitted::Turn(handle) = manager
                    .submit(TurnRequest::text(k, format!("s{s} m{m}")))
                    .await
                    .unwrap()
                else {
                    panic!("not a turn");
                };
                handle.outcome().await.unwrap().reply
            });
        }
    }
    let mut replies = Vec::new();
    while let Some(reply) = tasks.join_next().await {
        replies.push(reply.unwrap());
    }
    assert_eq!(replies.len(), SESSIONS * MESSAGES);
    // No two calls of one session (the message's first word) overlapped.
    let calls = model.calls();
    let session = |text: &str| {
        text.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let overlaps: Vec<(String, String)> = calls
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            calls[i + 1..]
                .iter()
                .filter(move |b| session(&a.text) == session(&b.text) && a.overlaps(b))
                .map(move |b| (a.text.clone(), b.text.clone()))
        })
        .collect();
    assert_eq!(overlaps, vec![]);
    let peak = model.peak_in_flight();
    assert!(peak > 1, "sessions never ran at once (peak {peak})");

    for s in 0..SESSIONS {
        let k = key(&format!("test:s{s}"));
        let history: Vec<Message> = store
            .history(&k)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.message)
            .collect();
        assert_eq!(history.len(), 2 * MESSAGES, "{k}");
        // Each answer follows its own question: no interleaving.
        for pair in history.chunks(2) {
            assert_eq!(
                pair[1],
                Message::assistant(format!("re: {}", pair[0].text()))
            );
        }
        // Turns ran in the order they were accepted.
        let turns: Vec<_> = store
            .history(&k)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.turn.unwrap())
            .collect();
        let mut sorted = turns.clone();
        sorted.sort();
        assert_eq!(turns, sorted, "{k}");
    }
    assert_eq!(store.open_turns(None).await.unwrap(), vec![]);
    manager.shutdown().await;
    assert_eq!(manager.active_lanes(), 0);
}

#[tokio::test]
async fn a_message_sent_while_a_turn_runs_is_accepted_at_once_and_queued_visibly() {
    let gate = Arc::new(Semaphore::new(0));
    let model = ScriptedModel::builder("m").gate(gate.clone()).build();
    let dir = tempfile::tempdir().unwrap();
    let (manager, store) = crate::with_model(dir.path(), model.clone()).await;
    let k = key("cli:q");
    let mut events = manager.subscribe(&k);
    let submit = |text: &str| {
        let manager = manager.clone();
        let request = TurnRequest::text(k.clone(), text);
        async move {
            match manager.submit(request).await.unwrap() {
                Submitted::Turn(handle) => handle,
                Submitted::Command { .. } => panic!("not a turn"),
            }
        }
    };
    let first = submit("first").await;
    // Wait until the first turn is inside the model.
    while model.calls().is_empty() {
        tokio::task::yield_now().await;
    }
    let second = submit("second").await;
    // Accepted: stored as a pending turn while the first still runs.
    let open = store.open_turns(Some(&k)).await.unwrap();
    assert_eq!(
        open.iter().map(|t| (t.id, t.status)).collect::<Vec<_>>(),
        vec![
            (first.turn, TurnStatus::Running),
            (second.turn, TurnStatus::Pending)
        ]
    );
    let mut queued = None;
    while queued.is_none() {
        let envelope = events.next().await.unwrap().unwrap();
        if let AgentEvent::Queued { ahead } = envelope.event {
            queued = Some((envelope.turn, ahead));
        }
    }
    assert_eq!(queued, Some((Some(second.turn), 1)));
    gate.add_permits(2);
    assert_eq!(first.outcome().await.unwrap().reply, "re: first");
    assert_eq!(second.outcome().await.unwrap().reply, "re: second");
}

#[tokio::test]
async fn cancel_stops_a_model_stream_that_is_running() {
    let model = ScriptedModel::new("m", vec![Script::Hang("partial ".into())]);
    let h = Harness::new(vec![model], Setup::default()).await;
    let k = key("cli:c");
    let mut events = h.manager.subscribe(&k);
    let handle = h.submit(&k, "talk forever").await;
    let turn = handle.turn;
    // The stream is running once its first delta arrives.
    loop {
        let envelope = events.next().await.unwrap().unwrap();
        if matches!(envelope.event, AgentEvent::ContentDelta { .. }) {
            break;
        }
    }
    let started = std::time::Instant::now();
    assert!(h.manager.cancel(&k));
    let result = tokio::time::timeout(Duration::from_secs(5), handle.outcome())
        .await
        .expect("the cancelled turn ended");
    let elapsed = started.elapsed();
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    let rest = drain_turn(&mut events, turn).await;
    assert_eq!(
        rest,
        vec![
            AgentEvent::RunState {
                state: RunState::CancelRequested
            },
            AgentEvent::RunState {
                state: RunState::Cancelled
            },
        ]
    );
    eprintln!("cancel reached the model stream in {elapsed:?}");
    assert_eq!(h.history(&k).await, vec![Message::user("talk forever")]);
}

#[tokio::test]
async fn cancel_kills_a_tool_process_that_is_running_and_pairs_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pid");
    let command = format!("echo $$ > {}; exec sleep 30", marker.display());
    let model = ScriptedModel::replies("m", vec![tool_use("t1", &command)]);
    // No sandbox, so `$$` is the pid this test sees (bubblewrap gives the
    // command a PID namespace of its own).
    let setup = Setup {
        tools: ToolsConfig {
            sandbox: SandboxConfig {
                mode: SandboxMode::None,
                ..SandboxConfig::default()
            },
            ..Setup::default().tools
        },
        ..Setup::default()
    };
    let h = Harness::in_dir(dir, vec![model], setup).await;
    let k = key("cli:c");
    let handle = h.submit(&k, "sleep").await;
    // Wait until the tool's process has really started.
    let started = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(text) = std::fs::read_to_string(&marker)
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let pid = started.expect("the tool never started");
    assert!(h.manager.cancel(&k));
    let result = tokio::time::timeout(Duration::from_secs(5), handle.outcome())
        .await
        .expect("the cancelled turn ended");
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    // Killed: gone, or a zombie until its reaper gets to it. The kill is
    // sent before the turn ends; allow the kernel a moment to deliver it.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !gone(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(gone(pid), "the tool's process {pid} outlived the cancel");
    let history = h.history(&k).await;
    assert_eq!(
        history.last().unwrap().content,
        vec![flynn_protocol::ContentBlock::ToolResult {
            tool_use_id: "t1".into(),
            content: "shell.exec was cancelled".into(),
            is_error: true,
        }]
    );
}

#[tokio::test]
async fn idle_lanes_are_dropped_and_come_back_on_demand() {
    let mut setup = Setup::default();
    setup.sessions.lane_idle_secs = 1;
    let h = Harness::new(vec![ScriptedModel::echo("m")], setup).await;
    for s in 0..20 {
        let (result, _) = h.send(&key(&format!("test:{s}")), "hi").await;
        result.unwrap();
    }
    assert!(h.manager.active_lanes() > 0);
    // Each lane retires one idle second after its last operation.
    let retired = tokio::time::timeout(Duration::from_secs(10), async {
        while h.manager.active_lanes() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        retired.is_ok(),
        "{} lanes still active",
        h.manager.active_lanes()
    );
    // A dropped lane is started again by the next message, with its history.
    let (result, _) = h.send(&key("test:3"), "again").await;
    assert_eq!(result.unwrap().reply, "re: again");
    assert_eq!(h.history(&key("test:3")).await.len(), 4);
}

#[tokio::test]
async fn events_carry_an_envelope_and_a_global_subscriber_sees_every_session() {
    let h = Harness::new(vec![ScriptedModel::echo("m")], Setup::default()).await;
    let mut all = h.manager.subscribe_all();
    let a = key("cli:a");
    let b = key("cli:b");
    h.send(&a, "one").await.0.unwrap();
    h.send(&b, "two").await.0.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 8 {
        let envelope = all.next().await.unwrap().unwrap();
        assert!(envelope.time_ms > 0);
        seen.push((
            envelope.session.to_string(),
            envelope.seq,
            envelope.turn.is_some(),
        ));
    }
    // Each session numbers its own events from 0; every event has its turn.
    assert_eq!(
        seen,
        vec![
            ("cli:a".into(), 0, true),
            ("cli:a".into(), 1, true),
            ("cli:a".into(), 2, true),
            ("cli:a".into(), 3, true),
            ("cli:b".into(), 0, true),
            ("cli:b".into(), 1, true),
            ("cli:b".into(), 2, true),
            ("cli:b".into(), 3, true),
        ]
    );
}

#[tokio::test]
async fn a_subscriber_that_never_reads_is_told_it_lagged_and_never_stalls_the_turn() {
    let model = ScriptedModel::replies("m", vec![Message::assistant("end")]);
    *model.extra_deltas.lock().unwrap() = SESSION_CAPACITY + 100;
    let h = Harness::new(vec![model], Setup::default()).await;
    let k = key("cli:slow");
    let mut slow = h.manager.subscribe(&k);
    let handle = h.submit(&k, "stream a lot").await;
    assert_eq!(handle.outcome().await.unwrap().reply, "end");
    let first = slow.next().await.unwrap();
    let lagged = first.unwrap_err();
    // Start, the extra deltas, "end", done and complete: 104 more events
    // than the buffer holds.
    assert_eq!(lagged.skipped, 104);
    let next = slow.next().await.unwrap().unwrap();
    assert!(matches!(next.event, AgentEvent::ContentDelta { .. }));
}

#[tokio::test]
async fn a_followed_turn_hands_on_only_its_own_events_and_ends_with_its_last_state() {
    let model = ScriptedModel::new("m", vec![Script::Hang("thinking".into())]);
    let h = Harness::new(vec![model], Setup::default()).await;
    let k = key("cli:follow");
    let mut watch = h.manager.subscribe(&k);
    let first = h.submit(&k, "x").await;
    // The first is running (streaming "thinking") before the second comes.
    while let Some(event) = watch.next().await {
        if matches!(event.unwrap().event, AgentEvent::ContentDelta { .. }) {
            break;
        }
    }
    // The second waits behind the first, which is cancelled while the
    // second is followed: the first's last events are not handed on.
    let Followed::Turn(mut second) = h
        .manager
        .submit_and_follow(TurnRequest::text(k.clone(), "y"))
        .await
        .unwrap()
    else {
        panic!("a command, not a turn");
    };
    assert!(h.manager.cancel_turn(&k, first.turn).await);
    let mut seen = Vec::new();
    let followed = async {
        while let Some(event) = second.next().await {
            let envelope = event.unwrap();
            assert_eq!(envelope.turn, Some(second.turn()), "{:?}", envelope.event);
            seen.push(envelope.event);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), followed)
        .await
        .expect("the followed turn's events end");
    // Told it waits behind the first, then run.
    assert!(
        matches!(seen.first(), Some(AgentEvent::Queued { .. })),
        "{seen:?}"
    );
    assert!(matches!(
        seen[1],
        AgentEvent::RunState {
            state: RunState::Start
        }
    ));
    assert!(matches!(
        seen.last(),
        Some(AgentEvent::RunState {
            state: RunState::Complete
        })
    ));
    assert!(second.end_seen());
    assert!(second.next().await.is_none(), "nothing after the end");
    // The cancelled message stays in the history, before this one.
    assert_eq!(second.outcome().await.unwrap().reply, "re: x y");
    assert!(matches!(first.outcome().await, Err(Error::Cancelled)));
}

#[tokio::test]
async fn a_followed_turn_whose_end_was_lost_to_lag_still_ends_with_its_outcome() {
    let model = ScriptedModel::replies(
        "m",
        vec![Message::assistant("one"), Message::assistant("two")],
    );
    // Each turn publishes more events than a session's buffer holds.
    *model.extra_deltas.lock().unwrap() = SESSION_CAPACITY + 100;
    let h = Harness::new(vec![model], Setup::default()).await;
    let k = key("cli:behind");
    let Followed::Turn(mut first) = h
        .manager
        .submit_and_follow(TurnRequest::text(k.clone(), "one"))
        .await
        .unwrap()
    else {
        panic!("a command, not a turn");
    };
    // Not read until the next turn has pushed the first one's end out of
    // the buffer.
    let second = h.submit(&k, "two").await;
    assert_eq!(second.outcome().await.unwrap().reply, "two");
    let mut handed_on = Vec::new();
    let followed = async {
        while let Some(event) = first.next().await {
            handed_on.push(event.map(|envelope| envelope.event));
        }
    };
    tokio::time::timeout(Duration::from_secs(20), followed)
        .await
        .expect("the events end with the turn although its last state was lost");
    assert_eq!(handed_on.len(), 1, "{handed_on:?}");
    assert!(handed_on[0].is_err(), "a lag notice: {handed_on:?}");
    assert!(!first.end_seen());
    assert_eq!(first.outcome().await.unwrap().reply, "one");
}

#[tokio::test]
async fn shutdown_kills_the_background_processes_turns_started() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pid");
    let start = Message {
        role: flynn_protocol::Role::Assistant,
        content: vec![flynn_protocol::ContentBlock::ToolUse {
            id: "p1".into(),
            name: "process.start".into(),
            input: serde_json::json!({
                "command": format!("echo $$ > {}; exec sleep 300", marker.display())
            }),
        }],
    };
    let model = ScriptedModel::replies("m", vec![start, Message::assistant("Started.")]);
    // No sandbox, so `$$` is a pid this test can look up.
    let setup = Setup {
        tools: ToolsConfig {
            sandbox: SandboxConfig {
                mode: SandboxMode::None,
                ..SandboxConfig::default()
            },
            ..Setup::default().tools
        },
        ..Setup::default()
    };
    let h = Harness::in_dir(dir, vec![model], setup).await;
    let (result, _) = h.send(&key("cli:bg"), "start the server").await;
    assert_eq!(result.unwrap().reply, "Started.");
    let pid = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(text) = std::fs::read_to_string(&marker)
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the background process never started");
    assert!(!gone(pid), "the process runs after its turn ended");
    h.manager.shutdown().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !gone(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(gone(pid), "background process {pid} outlived the shutdown");
}

/// `gateway.shutdown_grace_secs` can hold any u64; a grace too long to add
/// to the clock is as good as forever, not a panic at shutdown.
#[tokio::test]
async fn a_drain_with_a_grace_past_the_end_of_time_returns() {
    let gate = Arc::new(Semaphore::new(0));
    let model = ScriptedModel::builder("m").gate(gate.clone()).build();
    let dir = tempfile::tempdir().unwrap();
    let (manager, _store) = crate::with_model(dir.path(), model).await;
    assert_eq!(manager.drain(Duration::from_secs(u64::MAX)).await, 0);
    assert_eq!(manager.drain(Duration::MAX).await, 0);
}
