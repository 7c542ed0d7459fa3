//! Nodes sharing one PostgreSQL store: leases, the order of turns, who
//! owns open turns, and signals. Each test is two stores (two nodes) on a
//! database of its own (see [`super::tests`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flynn_protocol::ContentBlock;
use tokio::sync::broadcast;

use super::tests::{TestDb, key, origin};
use super::*;
use crate::cluster::{Cluster, Lease, Received, Signal, TurnOwner};

/// Makes `node` look silent past the TTL to the others (its last
/// heartbeat a minute ago).
async fn silence(db: &TestDb, node: &NodeId) {
    let mut raw = db.raw().await;
    sqlx::query("UPDATE cluster_nodes SET seen_at = now() - interval '1 minute' WHERE id = $1")
        .bind(&node.0)
        .execute(&mut raw)
        .await
        .unwrap();
}

async fn node(db: &TestDb) -> (PgStore, PgCluster) {
    let store = db.open().await;
    let cluster = store.join_cluster(NodeKind::Daemon).await.unwrap();
    (store, cluster)
}

fn text(text: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

/// The next signal from another node that matches, within five seconds.
async fn next_signal(
    rx: &mut broadcast::Receiver<Received>,
    matches: impl Fn(&Signal) -> bool,
) -> Received {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let received = rx.recv().await.unwrap();
            if matches(&received.signal) {
                return received;
            }
        }
    })
    .await
    .expect("no such signal within 5 s")
}

#[tokio::test]
async fn one_node_holds_a_lease_until_it_gives_it_back() {
    let db = TestDb::new().await;
    let (_, a) = node(&db).await;
    let (_, b) = node(&db).await;
    let session = key("telegram:1");
    let mut b_signals = b.signals();

    assert_eq!(a.acquire(&session).await.unwrap(), Lease::Held);
    assert_eq!(a.acquire(&session).await.unwrap(), Lease::Held, "kept");
    assert_eq!(
        b.acquire(&session).await.unwrap(),
        Lease::HeldBy(a.node().clone())
    );
    // Another session is free for b.
    assert_eq!(b.acquire(&key("telegram:2")).await.unwrap(), Lease::Held);

    a.release(&session).await.unwrap();
    let released = next_signal(&mut b_signals, |s| matches!(s, Signal::Released { .. })).await;
    assert_eq!(released.from, *a.node());
    assert_eq!(
        released.signal,
        Signal::Released {
            session: session.clone()
        }
    );
    assert_eq!(b.acquire(&session).await.unwrap(), Lease::Held);
    assert_eq!(
        a.acquire(&session).await.unwrap(),
        Lease::HeldBy(b.node().clone())
    );

    let nodes = a.nodes().await.unwrap();
    assert_eq!(nodes.len(), 2);
    let of = |id: &NodeId| nodes.iter().find(|n| &n.id == id).unwrap();
    assert_eq!(of(a.node()).leases, 0);
    assert_eq!(of(b.node()).leases, 2);
    assert!(
        nodes
            .iter()
            .all(|n| n.alive && n.kind == "daemon" && n.local)
    );
    assert_eq!(of(a.node()).pid, std::process::id());

    // A node forgotten (its process known gone) loses its leases at once.
    let c_store = db.open().await;
    let c = c_store.join_cluster(NodeKind::Command).await.unwrap();
    let other = key("cli:c");
    assert_eq!(c.acquire(&other).await.unwrap(), Lease::Held);
    assert_eq!(
        a.acquire(&other).await.unwrap(),
        Lease::HeldBy(c.node().clone())
    );
    c.stop_tasks();
    a.forget(c.node()).await.unwrap();
    assert_eq!(a.acquire(&other).await.unwrap(), Lease::Held);
    assert_eq!(a.nodes().await.unwrap().len(), 2, "c is forgotten");

    // Leaving gives every lease back at once and tells the others.
    let mut a_signals = a.signals();
    b.leave().await;
    next_signal(&mut a_signals, |s| matches!(s, Signal::Released { .. })).await;
    assert_eq!(a.acquire(&session).await.unwrap(), Lease::Held);
    assert_eq!(a.nodes().await.unwrap().len(), 1, "b is gone");
}

#[tokio::test]
async fn a_silent_node_loses_its_leases_and_may_start_nothing_more() {
    let db = TestDb::new().await;
    let (a_store, a) = node(&db).await;
    let (_, b) = node(&db).await;
    let session = key("telegram:1");
    assert_eq!(a.acquire(&session).await.unwrap(), Lease::Held);
    assert!(b.orphaned_sessions().await.unwrap().is_empty());
    let pending = a_store
        .accept(&session, &text("hello"), &origin(1))
        .await
        .unwrap();

    // a freezes: no heartbeat, and its last one is older than the TTL.
    a.stop_tasks();
    silence(&db, a.node()).await;

    assert_eq!(
        b.orphaned_sessions().await.unwrap(),
        std::slice::from_ref(&session),
        "its open turn waits for a node to take it"
    );
    assert_eq!(b.acquire(&session).await.unwrap(), Lease::Held);
    assert!(b.orphaned_sessions().await.unwrap().is_empty(), "b has it");
    let owners = b.turn_owners(&session).await.unwrap();
    assert_eq!(owners.get(&pending.id), Some(&TurnOwner::Gone));
    // a, thawed, may not start the turn: b runs the session now.
    let refused = a_store.start_turn(pending.id, 1).await.unwrap_err();
    assert!(
        matches!(&refused, Error::LeaseLost { turn, .. } if *turn == pending.id),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("another node runs session"));
    // Nor write anything more of a turn it had running: b has taken the
    // session over (and reports or reruns that turn).
    let running = pending.id;
    let answer = Message::assistant("late");
    let late = a_store
        .append_for_turn(&session, running, std::slice::from_ref(&answer))
        .await
        .unwrap_err();
    assert!(matches!(late, Error::LeaseLost { .. }), "{late:?}");
    let usage = UsageRecord {
        session: session.clone(),
        provider: "p".into(),
        model: "m".into(),
        tier: Tier::Default,
        purpose: Purpose::Conversation,
        usage: flynn_protocol::Usage::default(),
        cost_usd: None,
        partial: false,
    };
    let late = a_store
        .append_last_answer(&session, running, &answer, &usage)
        .await
        .unwrap_err();
    assert!(matches!(late, Error::LeaseLost { .. }), "{late:?}");
    let late = a_store
        .finish_turn(running, TurnStatus::Completed)
        .await
        .unwrap_err();
    assert!(matches!(late, Error::LeaseLost { .. }), "{late:?}");
    assert_eq!(
        a_store.turn(running).await.unwrap().unwrap().status,
        TurnStatus::Pending,
        "unchanged"
    );
    assert!(a_store.history(&session).await.unwrap().is_empty());
    // Nor start a new message at once: it is accepted, and waits.
    let later = a_store
        .accept_and_start(&session, &text("again"), &origin(1))
        .await
        .unwrap();
    assert_eq!(later.status, TurnStatus::Pending);
    assert_eq!(later.message_seq, None);
    assert!(a_store.history(&session).await.unwrap().is_empty());
}

#[tokio::test]
async fn turns_start_in_the_order_their_session_accepted_them_across_nodes() {
    let db = TestDb::new().await;
    let (a_store, a) = node(&db).await;
    let (b_store, b) = node(&db).await;
    let session = key("web:ann");
    assert_eq!(a.acquire(&session).await.unwrap(), Lease::Held);

    // b accepts a message for a's session; a, idle, accepts the next one.
    let first = b_store
        .accept(&session, &text("first"), &origin(2))
        .await
        .unwrap();
    let second = a_store
        .accept_and_start(&session, &text("second"), &origin(1))
        .await
        .unwrap();
    assert_eq!(
        second.status,
        TurnStatus::Pending,
        "not started ahead of the first"
    );
    let refused = a_store.start_turn(second.id, 1).await.unwrap_err();
    assert!(
        matches!(refused, Error::NotNext { turn, waiting } if turn == second.id && waiting == first.id),
        "{refused:?}"
    );
    assert!(
        b_store.start_turn(first.id, 2).await.is_err(),
        "b holds no lease"
    );

    let owners = a.turn_owners(&session).await.unwrap();
    assert_eq!(owners.get(&first.id), Some(&TurnOwner::Alive));
    assert_eq!(owners.get(&second.id), Some(&TurnOwner::This));

    a_store.start_turn(first.id, 1).await.unwrap();
    a_store
        .finish_turn(first.id, TurnStatus::Completed)
        .await
        .unwrap();
    a_store.start_turn(second.id, 1).await.unwrap();
    let history: Vec<String> = a_store
        .history(&session)
        .await
        .unwrap()
        .iter()
        .map(|m| m.message.text())
        .collect();
    assert_eq!(history, ["first", "second"]);
    // The runner is the turn's owner now.
    let owners = b.turn_owners(&session).await.unwrap();
    assert_eq!(owners.get(&first.id), None, "finished");
    assert_eq!(owners.get(&second.id), Some(&TurnOwner::Alive));

    // The holder with nothing open starts a message at once.
    a_store
        .finish_turn(second.id, TurnStatus::Completed)
        .await
        .unwrap();
    let third = a_store
        .accept_and_start(&session, &text("third"), &origin(1))
        .await
        .unwrap();
    assert_eq!(third.status, TurnStatus::Running);
    assert!(third.message_seq.is_some());

    // A node gone: its open turns are nobody's.
    let fourth = b_store
        .accept(&session, &text("fourth"), &origin(2))
        .await
        .unwrap();
    b.leave().await;
    let owners = a.turn_owners(&session).await.unwrap();
    assert_eq!(owners.get(&fourth.id), Some(&TurnOwner::Gone));
}

#[tokio::test]
async fn signals_reach_the_other_nodes_long_ones_through_the_table() {
    let db = TestDb::new().await;
    let (_, a) = node(&db).await;
    let (_, b) = node(&db).await;
    let mut a_signals = a.signals();
    let mut b_signals = b.signals();
    let session = key("web:ann");

    let long = "é".repeat(20_000);
    b.signal_all(vec![
        Signal::Accepted {
            session: session.clone(),
            to: a.node().clone(),
        },
        Signal::Event {
            session: session.clone(),
            body: long.clone(),
        },
        Signal::Released {
            session: session.clone(),
        },
        Signal::Cancel {
            session: session.clone(),
            turn: Some(TurnId(9)),
        },
        Signal::Reset {
            session: session.clone(),
        },
    ])
    .await
    .unwrap();
    let accepted = next_signal(&mut a_signals, |_| true).await;
    assert_eq!(accepted.from, *b.node());
    assert_eq!(
        accepted.signal,
        Signal::Accepted {
            session: session.clone(),
            to: a.node().clone(),
        }
    );
    let event = next_signal(&mut a_signals, |_| true).await;
    assert_eq!(
        event.signal,
        Signal::Event {
            session: session.clone(),
            body: long
        },
        "in order, whole"
    );
    let released = next_signal(&mut a_signals, |_| true).await;
    assert_eq!(
        released.signal,
        Signal::Released {
            session: session.clone()
        }
    );
    let cancel = next_signal(&mut a_signals, |_| true).await;
    assert_eq!(
        cancel.signal,
        Signal::Cancel {
            session: session.clone(),
            turn: Some(TurnId(9)),
        }
    );
    let reset = next_signal(&mut a_signals, |_| true).await;
    assert_eq!(
        reset.signal,
        Signal::Reset {
            session: session.clone()
        }
    );
    // A node does not hear itself.
    a.signal(Signal::Accepted {
        session: session.clone(),
        to: b.node().clone(),
    })
    .await
    .unwrap();
    next_signal(&mut b_signals, |s| matches!(s, Signal::Accepted { .. })).await;
    assert!(a_signals.try_recv().is_err(), "a heard its own signal");
}

#[tokio::test]
async fn a_node_silent_past_the_ttl_knows_it_was_not_alive() {
    let db = TestDb::new().await;
    let (_, a) = node(&db).await;
    assert!(a.is_alive());
    silence(&db, a.node()).await;
    // Its next heartbeat (every 2 s) finds out, and renews its presence.
    tokio::time::timeout(Duration::from_secs(5), async {
        while a.is_alive() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the node still thinks it was alive");
    tokio::time::timeout(Duration::from_secs(5), async {
        while !a.is_alive() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the node did not count itself alive again after renewing");
}

#[tokio::test]
async fn a_role_is_held_by_one_node_and_taken_over_when_it_goes() {
    let db = TestDb::new().await;
    let (_, a) = node(&db).await;
    let (_, b) = node(&db).await;
    assert_eq!(a.acquire_role("automation").await.unwrap(), Lease::Held);
    assert_eq!(a.acquire_role("automation").await.unwrap(), Lease::Held);
    assert_eq!(
        b.acquire_role("automation").await.unwrap(),
        Lease::HeldBy(a.node().clone())
    );
    assert_eq!(
        b.acquire_role("channel:telegram").await.unwrap(),
        Lease::Held
    );
    let nodes = a.nodes().await.unwrap();
    let roles = |id: &NodeId| nodes.iter().find(|n| &n.id == id).unwrap().roles.clone();
    assert_eq!(roles(a.node()), ["automation"]);
    assert_eq!(roles(b.node()), ["channel:telegram"]);

    // Given back: the other takes it.
    a.release_role("automation").await.unwrap();
    assert_eq!(b.acquire_role("automation").await.unwrap(), Lease::Held);
    // b freezes past the TTL: a takes both of its roles.
    b.stop_tasks();
    silence(&db, b.node()).await;
    assert_eq!(a.acquire_role("automation").await.unwrap(), Lease::Held);
    assert_eq!(
        a.acquire_role("channel:telegram").await.unwrap(),
        Lease::Held
    );
    // A node that leaves gives its roles back.
    a.leave().await;
    let (_, c) = node(&db).await;
    assert_eq!(c.acquire_role("automation").await.unwrap(), Lease::Held);
}

#[tokio::test]
async fn a_store_joins_once() {
    let db = TestDb::new().await;
    let (store, _a) = node(&db).await;
    let again = store.join_cluster(NodeKind::Command).await.unwrap_err();
    assert!(again.to_string().contains("joined the cluster already"));
}
