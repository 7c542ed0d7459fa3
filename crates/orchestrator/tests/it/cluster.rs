//! Two runtimes (two nodes) on one PostgreSQL store: a session's turns
//! run on the node holding its lease, whichever node a message arrives
//! at, in the order the session accepted them; the other node's callers
//! get the outcome and the events.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flynn_models::ModelClient;
use flynn_orchestrator::{AgentEvent, SessionManager, TurnRequest};
use flynn_protocol::{Role, RunState, SessionKey};
use flynn_sessions::{Cluster, Conversations, NodeKind, PgStore, Turns};
use flynn_testkit::postgres::TestDatabase;

use crate::{ScriptedModel, Setup, key, manager_with};

struct Node {
    _dir: tempfile::TempDir,
    manager: SessionManager,
    model: Arc<ScriptedModel>,
    store: PgStore,
}

async fn node(db: &TestDatabase) -> Node {
    node_with(db, ScriptedModel::echo("m")).await
}

async fn node_with(db: &TestDatabase, model: Arc<ScriptedModel>) -> Node {
    node_set_up(db, model, Vec::new(), Setup::default()).await
}

/// A node with `model` as `m`, the `others` under their names, and
/// `setup` (its cluster set here).
async fn node_set_up(
    db: &TestDatabase,
    model: Arc<ScriptedModel>,
    others: Vec<Arc<ScriptedModel>>,
    setup: Setup,
) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let store = PgStore::open(db.url()).await.unwrap();
    let cluster: Arc<dyn Cluster> = Arc::new(store.join_cluster(NodeKind::Daemon).await.unwrap());
    let mut clients = HashMap::from([("m".to_owned(), model.clone() as Arc<dyn ModelClient>)]);
    for other in others {
        clients.insert(other.info().provider.clone(), other as Arc<dyn ModelClient>);
    }
    let manager = manager_with(
        dir.path(),
        Arc::new(store.clone()),
        clients,
        Setup {
            cluster: Some(cluster),
            ..setup
        },
    );
    Node {
        _dir: dir,
        manager,
        model,
        store,
    }
}

/// The history's text, user and assistant messages alike.
async fn texts(store: &PgStore, key: &SessionKey) -> Vec<String> {
    store
        .history(key)
        .await
        .unwrap()
        .iter()
        .map(|m| m.message.text())
        .collect()
}

async fn send(node: &Node, key: &SessionKey, text: &str) -> (String, Vec<AgentEvent>) {
    let turn = node
        .manager
        .submit_and_follow(TurnRequest::text(key.clone(), text))
        .await
        .unwrap();
    let flynn_orchestrator::Followed::Turn(mut turn) = turn else {
        panic!("a command, not a turn");
    };
    let mut events = Vec::new();
    let collected = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = turn.next().await {
            let envelope = event.unwrap();
            if envelope.turn == Some(turn.turn()) {
                events.push(envelope.event);
            }
        }
        turn.outcome().await
    })
    .await
    .expect("the turn did not end within 20 s");
    (collected.unwrap().reply, events)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_at_the_other_node_runs_on_the_session_holder_and_its_events_come_back() {
    let db = TestDatabase::create().await;
    let a = node(&db).await;
    let b = node(&db).await;
    let k = key("web:ann");

    let (reply, _) = send(&a, &k, "one").await;
    assert_eq!(reply, "re: one");
    // a's lane holds the session: b's message runs there.
    let (reply, events) = send(&b, &k, "two").await;
    assert_eq!(reply, "re: two");
    assert_eq!(a.model.calls().len(), 2, "both ran on a");
    assert_eq!(b.model.calls().len(), 0, "b ran nothing");
    // b's follower saw the turn as it ran on a.
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ContentDelta { .. })),
        "{events:?}"
    );
    assert!(
        matches!(
            events.last(),
            Some(AgentEvent::RunState {
                state: RunState::Complete
            })
        ),
        "{events:?}"
    );
    assert_eq!(
        texts(&b.store, &k).await,
        ["one", "re: one", "two", "re: two"]
    );
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_sent_to_both_nodes_are_answered_once_each_in_acceptance_order() {
    let db = TestDatabase::create().await;
    let a = node(&db).await;
    let b = node(&db).await;
    let k = key("telegram:42");
    // Accepted alternately on a and b, without waiting for answers.
    let mut handles = Vec::new();
    for i in 0..10 {
        let at = if i % 2 == 0 { &a } else { &b };
        let submitted = at
            .manager
            .submit(TurnRequest::text(k.clone(), format!("m{i}")))
            .await
            .unwrap();
        let flynn_orchestrator::Submitted::Turn(handle) = submitted else {
            panic!("a command");
        };
        handles.push((i, handle));
    }
    for (i, handle) in handles {
        let outcome = tokio::time::timeout(Duration::from_secs(30), handle.outcome())
            .await
            .expect("no outcome within 30 s")
            .unwrap();
        assert_eq!(outcome.reply, format!("re: m{i}"));
    }
    let history = a.store.history(&k).await.unwrap();
    let users: Vec<String> = history
        .iter()
        .filter(|m| m.message.role == Role::User)
        .map(|m| m.message.text())
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(users, expected, "acceptance order");
    for pair in history.chunks(2) {
        assert_eq!(
            pair[1].message.text(),
            format!("re: {}", pair[0].message.text())
        );
    }
    assert_eq!(
        a.model.calls().len() + b.model.calls().len(),
        10,
        "each answered once"
    );
    assert!(
        a.model.calls().is_empty() || b.model.calls().is_empty(),
        "one node ran the session: a {}, b {}",
        a.model.calls().len(),
        b.model.calls().len()
    );
    assert!(a.store.open_turns(Some(&k)).await.unwrap().is_empty());
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_stops_hands_its_sessions_over_at_once() {
    let db = TestDatabase::create().await;
    let a = node(&db).await;
    let b = node(&db).await;
    let k = key("web:ann");
    send(&a, &k, "one").await;
    let cluster = b.manager.cluster().unwrap().clone();
    assert_eq!(cluster.nodes().await.unwrap().len(), 2);
    a.manager.shutdown().await;
    // a left: no node to wait out, no lease to take over.
    let nodes = cluster.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0].leases, 0);
    assert_eq!(
        cluster.acquire(&k).await.unwrap(),
        flynn_sessions::Lease::Held
    );
    let (reply, _) = send(&b, &k, "two").await;
    assert_eq!(reply, "re: two");
    assert_eq!(b.model.calls().len(), 1, "b runs it now");
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_running_on_one_node_is_cancelled_from_the_other() {
    let (_db, a, b, running) = a_turn_running_on_a().await;
    let k = key("web:ann");

    // b has no turn of its own running, but the store says one runs.
    assert!(!b.manager.cancel(&k), "nothing runs on b itself");
    let reply = command(&b, &k, "/cancel").await;
    assert_eq!(reply, "Cancelling the running turn.");
    let outcome = tokio::time::timeout(Duration::from_secs(10), running.outcome())
        .await
        .expect("the turn on a was not cancelled within 10 s");
    assert!(
        matches!(outcome, Err(flynn_orchestrator::Error::Cancelled)),
        "{outcome:?}"
    );
    // Nothing runs now: b says so.
    assert!(!b.manager.cancel_anywhere(&k).await);
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_sent_to_the_other_node_empties_the_session_on_its_holder() {
    let (_db, a, b, running) = a_turn_running_on_a().await;
    let k = key("web:ann");

    let reply = command(&b, &k, "/reset").await;
    assert_eq!(reply, "Conversation reset: this session starts afresh.");
    // a, which runs the session, cancels its turn and then empties it:
    // nothing of the turn comes back after the reset.
    let outcome = tokio::time::timeout(Duration::from_secs(10), running.outcome())
        .await
        .expect("the turn on a was not ended by the reset");
    assert!(
        matches!(outcome, Err(flynn_orchestrator::Error::Cancelled)),
        "{outcome:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), async {
        while b.store.info(&k).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the session was not emptied");
    assert!(a.store.open_turns(Some(&k)).await.unwrap().is_empty());
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

/// Two nodes, `a` running a turn of `web:ann` whose model hangs (it has
/// called it), `b` idle; and that turn's handle.
async fn a_turn_running_on_a() -> (TestDatabase, Node, Node, flynn_orchestrator::TurnHandle) {
    let db = TestDatabase::create().await;
    let a = node_with(&db, ScriptedModel::builder("m").then_hang("Half").build()).await;
    let b = node(&db).await;
    let flynn_orchestrator::Submitted::Turn(running) = a
        .manager
        .submit(TurnRequest::text(key("web:ann"), "a long one"))
        .await
        .unwrap()
    else {
        panic!("a command");
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while a.model.calls().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the turn never called its model");
    (db, a, b, running)
}

/// A chat command's reply, sent through `node`.
async fn command(node: &Node, key: &SessionKey, text: &str) -> String {
    match node
        .manager
        .submit(TurnRequest::text(key.clone(), text))
        .await
        .unwrap()
    {
        flynn_orchestrator::Submitted::Command { reply, .. } => reply,
        flynn_orchestrator::Submitted::Turn(_) => panic!("a turn, not a command"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_and_a_compaction_asked_at_the_other_node_take_effect_on_the_holder() {
    let db = TestDatabase::create().await;
    let setup = || {
        let mut models = flynn_testkit::runtime::tiers(&["m/one"]);
        models.tiers.fast = vec!["f/cheap".parse().unwrap()];
        Setup {
            models,
            ..Setup::default()
        }
    };
    let summariser = || {
        ScriptedModel::replies(
            "f",
            vec![flynn_protocol::Message::assistant("short summary")],
        )
    };
    let a = node_set_up(&db, ScriptedModel::echo("m"), vec![summariser()], setup()).await;
    let b = node_set_up(&db, ScriptedModel::echo("m"), vec![summariser()], setup()).await;
    let k = key("web:ann");
    for i in 0..6 {
        send(&a, &k, &format!("message {i}")).await;
    }

    // /model at b: a, which runs the session, uses it from now on.
    assert_eq!(
        command(&b, &k, "/model m/other").await,
        "This session now uses the model m/other (no fallback)."
    );
    tokio::time::timeout(Duration::from_secs(10), async {
        while !command(&a, &k, "/model").await.contains("m/other") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the node running the session kept the old model");
    send(&b, &k, "pinned").await;
    assert_eq!(a.model.calls().len(), 7, "the turn ran on a");
    assert_eq!(
        a.model.requests().last().map(|r| r.model.to_string()),
        Some("other".to_owned())
    );

    // /compact at b: a compacts (b's own compaction would race a's turns
    // over the history).
    assert_eq!(
        command(&b, &k, "/compact").await,
        "The conversation is being compacted on the node that runs it; its summary replaces the older messages when it is done."
    );
    tokio::time::timeout(Duration::from_secs(10), async {
        while texts(&a.store, &k).await.len() != 1 + 8 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the session was not compacted");
    assert!(texts(&a.store, &k).await[0].ends_with("short summary"));
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_voice_mode_set_at_the_other_node_holds_on_the_holder() {
    let db = TestDatabase::create().await;
    let a = node(&db).await;
    let b = node(&db).await;
    let k = key("telegram:42");
    send(&a, &k, "hello").await;

    // /voice at b, which does not run the session.
    assert_eq!(
        command(&b, &k, "/voice auto").await,
        "Voice replies: auto — a voice note is answered with a voice note."
    );
    assert_eq!(
        a.manager.voice_reply(&k).await.unwrap(),
        flynn_protocol::config::VoiceReply::Auto
    );
    tokio::time::timeout(Duration::from_secs(10), async {
        while !command(&a, &k, "/voice")
            .await
            .starts_with("Voice replies: auto")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the node running the session kept the old voice mode");
    assert!(command(&a, &k, "/status").await.contains(
        "\nVoice replies: auto — a voice note is answered with a voice note (this session)\n"
    ));
    // A setting changed at the holder keeps it: the holder read it.
    command(&a, &k, "/agent main").await;
    assert_eq!(
        a.store.metadata(&k).await.unwrap().voice,
        Some(flynn_protocol::config::VoiceReply::Auto)
    );
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_numbers_the_holders_events_in_its_own_sequence() {
    let db = TestDatabase::create().await;
    let a = node(&db).await;
    let b = node(&db).await;
    let k = key("web:ann");
    // a runs the session, and numbers many events of it.
    for i in 0..3 {
        send(&a, &k, &format!("message {i}")).await;
    }
    // b's caller sees b's own events (the command's reply) and a's (the
    // turn it runs), in one sequence without holes.
    let mut stream = b.manager.subscribe(&k);
    assert!(
        command(&b, &k, "/model")
            .await
            .starts_with("This session uses")
    );
    send(&b, &k, "from b").await;
    // Up to the end of b's turn as a ran it: its text, then its end.
    let mut seqs = Vec::new();
    let mut streamed = false;
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = stream.next().await {
            let event = event.unwrap();
            seqs.push(event.seq);
            match event.event {
                // Its own text: the tail of a's earlier turn may come
                // first.
                AgentEvent::ContentDelta { ref text } if text == "re: from b" => streamed = true,
                AgentEvent::RunState {
                    state: RunState::Complete,
                } if streamed => break,
                _ => {}
            }
        }
    })
    .await
    .expect("the turn's end never came");
    assert!(seqs.len() > 3, "{seqs:?}");
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(seqs, expected);
    a.manager.shutdown().await;
    b.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_draining_waits_for_its_own_turns_not_for_another_nodes() {
    // One process plays both nodes: the same pid, as two machines may
    // have.
    let (_db, a, b, running) = a_turn_running_on_a().await;
    let left = tokio::time::timeout(
        Duration::from_secs(5),
        b.manager.drain(Duration::from_secs(60)),
    )
    .await
    .expect("b waited for the turn a runs");
    assert_eq!(left, 0);
    // a's own turn keeps it waiting until its grace ends, and is counted.
    let left = tokio::time::timeout(
        Duration::from_secs(10),
        a.manager.drain(Duration::from_millis(300)),
    )
    .await
    .expect("a's drain ended with its grace");
    assert_eq!(left, 1);
    assert!(running.outcome().await.is_err());
}
