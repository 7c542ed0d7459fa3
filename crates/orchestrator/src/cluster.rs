//! A runtime as one node of a cluster (several processes on one
//! PostgreSQL store, see [`flynn_sessions::cluster`]).
//!
//! A session's lane runs its turns only while it holds the session's
//! lease; a lane on another node accepts messages (stores them as pending
//! turns), tells the holder, and hands its callers the outcome when the
//! holder's events report it. Two tasks per node do the talking:
//! - the forwarder sends this node's events to the others, batched;
//! - the dispatcher hands the other nodes' signals to this node's lanes
//!   and subscribers, and every [`SWEEP`] opens a lane for each session
//!   whose open turns have no live holder (a node died), so they are
//!   recovered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flynn_protocol::{AgentEvent, EventEnvelope, RunState, SessionKey, TurnId, TurnOutcome};
use flynn_sessions::{Cluster, Received, Signal, TurnRecord, TurnStatus};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::lane::{ClusterOp, LaneOp};
use crate::runtime::{Shared, lock};
use crate::{Error, Result};

/// Events waiting to be sent to the other nodes before newer ones are
/// dropped (the other nodes' subscribers then miss them).
pub(crate) const OUTBOX: usize = 16_384;
/// Events sent together, at most.
const BATCH: usize = 512;
/// How often a node looks for sessions left without a live holder.
pub(crate) const SWEEP: Duration = Duration::from_secs(3);

/// Forgets the nodes that ran on this machine (in this process-id
/// namespace) and whose process is gone: a daemon restarted after a crash
/// takes its sessions back at once instead of after
/// [`NODE_TTL`](flynn_sessions::cluster::NODE_TTL). Returns how many.
pub async fn forget_stopped_local_nodes(cluster: &dyn Cluster) -> Result<usize> {
    let mut forgotten = 0;
    for node in cluster.nodes().await? {
        if node.local && &node.id != cluster.node() && !crate::lane::process_alive(node.pid) {
            tracing::info!(node = %node.id, "forgetting a node of this machine whose process is gone");
            cluster.forget(&node.id).await?;
            forgotten += 1;
        }
    }
    Ok(forgotten)
}

/// Sends this node's events to the other nodes until `shutdown`, then
/// what is left.
pub(crate) async fn forward(
    mut outbox: mpsc::Receiver<Arc<EventEnvelope>>,
    cluster: Arc<dyn Cluster>,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            event = outbox.recv() => match event {
                Some(event) => event,
                None => return,
            },
            () = shutdown.cancelled() => {
                let mut left = Vec::new();
                while let Ok(event) = outbox.try_recv() {
                    left.push(event);
                }
                send(&*cluster, left).await;
                return;
            }
        };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match outbox.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        send(&*cluster, batch).await;
    }
}

/// One signal per session, its events in order.
async fn send(cluster: &dyn Cluster, batch: Vec<Arc<EventEnvelope>>) {
    if batch.is_empty() {
        return;
    }
    let mut order: Vec<SessionKey> = Vec::new();
    let mut by_session: HashMap<SessionKey, Vec<Arc<EventEnvelope>>> = HashMap::new();
    for event in batch {
        if !by_session.contains_key(&event.session) {
            order.push(event.session.clone());
        }
        by_session
            .entry(event.session.clone())
            .or_default()
            .push(event);
    }
    let mut signals = Vec::with_capacity(order.len());
    for session in order {
        let events = by_session.remove(&session).unwrap_or_default();
        match serde_json::to_string(&events) {
            Ok(body) => signals.push(Signal::Event { session, body }),
            Err(error) => tracing::warn!(%session, %error, "cannot encode events for other nodes"),
        }
    }
    if let Err(error) = cluster.signal_all(signals).await {
        tracing::warn!(%error, "cannot send events to the other nodes; their followers miss them");
    }
}

/// Hands the other nodes' signals to this node's lanes and subscribers,
/// and looks for orphaned sessions every [`SWEEP`], until shutdown.
pub(crate) async fn dispatch(shared: Arc<Shared>, cluster: Arc<dyn Cluster>) {
    let mut signals = cluster.signals();
    let mut sweep = tokio::time::interval(SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            _ = sweep.tick() => adopt_orphans(&shared, &*cluster).await,
            received = signals.recv() => match received {
                Ok(received) => handle(&shared, &*cluster, received),
                Err(broadcast::error::RecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "this node fell behind the cluster's signals; lanes check the store instead");
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// Opens a lane for each session whose open turns have no live holder:
/// the lane takes the lease and recovers them.
async fn adopt_orphans(shared: &Arc<Shared>, cluster: &dyn Cluster) {
    if shared.shutdown.is_cancelled() || !cluster.is_alive() {
        return;
    }
    match cluster.orphaned_sessions().await {
        Ok(sessions) => {
            for session in sessions {
                match existing_lane(shared, &session) {
                    // A lane following a holder that died: take over now.
                    Some(tx) => {
                        let _ = tx.try_send(LaneOp::Cluster(ClusterOp::Released));
                    }
                    None => {
                        tracing::info!(%session, "taking over a session whose node stopped");
                        shared.lane(&session);
                    }
                }
            }
        }
        Err(error) => tracing::warn!(%error, "cannot look for sessions left by stopped nodes"),
    }
}

fn existing_lane(shared: &Shared, session: &SessionKey) -> Option<mpsc::Sender<LaneOp>> {
    lock(&shared.lanes)
        .get(session)
        .map(|handle| handle.tx.clone())
}

fn handle(shared: &Arc<Shared>, cluster: &dyn Cluster, received: Received) {
    match received.signal {
        Signal::Accepted { session, to } => {
            if &to != cluster.node() {
                return;
            }
            match existing_lane(shared, &session) {
                Some(tx) => {
                    // A full lane misses it; the sender says it again.
                    let _ = tx.try_send(LaneOp::Cluster(ClusterOp::Accepted));
                }
                // Its lane retired; a new one takes the lease back (or
                // finds who has it) and runs what waits.
                None => {
                    shared.lane(&session);
                }
            }
        }
        Signal::Released { session } => {
            if let Some(tx) = existing_lane(shared, &session) {
                let _ = tx.try_send(LaneOp::Cluster(ClusterOp::Released));
            }
        }
        // The holder's lane empties the session, as for its own `/reset`.
        Signal::Reset { session } => {
            if existing_lane(shared, &session).is_none() {
                return;
            }
            let manager = crate::runtime::SessionManager::from_shared(shared.clone());
            tokio::spawn(async move {
                if let Err(error) = manager.reset(&session).await {
                    tracing::warn!(%session, %error, "cannot reset the session another node asked to reset");
                }
            });
        }
        Signal::Settings { session } => {
            if let Some(tx) = existing_lane(shared, &session) {
                let _ = tx.try_send(LaneOp::Cluster(ClusterOp::Settings));
            }
        }
        // The holder's lane compacts, as for its own `/compact`; what it
        // says reaches the asking node as the session's events.
        Signal::Compact { session, extract } => {
            if let Some(tx) = existing_lane(shared, &session) {
                let (reply, _) = tokio::sync::oneshot::channel();
                let principal = if extract {
                    flynn_protocol::Principal::Owner
                } else {
                    flynn_protocol::Principal::Guest {
                        channel: session.channel().to_owned(),
                        id: String::new(),
                    }
                };
                let _ = tx.try_send(LaneOp::Command {
                    command: crate::commands::Command::Compact,
                    principal,
                    reply,
                });
            }
        }
        // Only a node with a lane for the session can be running it.
        Signal::Cancel { session, turn } => {
            if existing_lane(shared, &session).is_none() {
                return;
            }
            let manager = crate::runtime::SessionManager::from_shared(shared.clone());
            let from = received.from.clone();
            tokio::spawn(async move {
                let cancelled = match turn {
                    Some(turn) => manager.cancel_turn_here(&session, turn).await,
                    None => manager.cancel(&session),
                };
                if cancelled {
                    tracing::info!(%session, %from, "cancelled a turn at another node's request");
                }
            });
        }
        Signal::Event { session, body } => {
            let events: Vec<EventEnvelope> = match serde_json::from_str(&body) {
                Ok(events) => events,
                Err(error) => {
                    tracing::warn!(%session, %error, from = %received.from, "events from another node cannot be read");
                    return;
                }
            };
            let lane = lock(&shared.lanes).get(&session).cloned();
            for event in events {
                let ended = ended(&received.from.0, &event);
                match &lane {
                    Some(lane) => {
                        lane.events.publish_remote(event);
                        if let Some((turn, result)) = ended {
                            let _ = lane.tx.try_send(LaneOp::Cluster(ClusterOp::Ended {
                                turn,
                                result: Box::new(result),
                            }));
                        }
                    }
                    None => shared.bus.publish_remote(Arc::new(event)),
                }
            }
        }
    }
}

/// The outcome an event of another node reports for its turn, if it ends
/// it: its answer, its error, or its cancellation.
fn ended(node: &str, event: &EventEnvelope) -> Option<(TurnId, Result<TurnOutcome>)> {
    // The node that ran it stopped, and the one that took the session
    // over reported it (a rerun goes on to its own end).
    if let AgentEvent::Interrupted {
        turn,
        action: flynn_protocol::RecoveryAction::Reported,
        message,
    } = &event.event
    {
        return Some((*turn, Err(Error::Interrupted(message.clone()))));
    }
    let turn = event.turn?;
    let result = match &event.event {
        AgentEvent::Done { outcome } => Ok(outcome.clone()),
        AgentEvent::Error { code, message } => Err(Error::Remote {
            node: node.to_owned(),
            code: *code,
            message: message.clone(),
        }),
        AgentEvent::RunState {
            state: RunState::Cancelled,
        } => Err(Error::Cancelled),
        _ => return None,
    };
    Some((turn, result))
}

/// The outcome of a turn another node finished, read from the store, for
/// when its events did not arrive: the answer it stored, without the
/// model's name, usage or timing, which only its events carry.
pub(crate) async fn stored_outcome(
    shared: &Shared,
    record: &TurnRecord,
) -> Option<Result<TurnOutcome>> {
    match record.status {
        TurnStatus::Pending | TurnStatus::Running => None,
        TurnStatus::Cancelled => Some(Err(Error::Cancelled)),
        TurnStatus::Interrupted => Some(Err(Error::Interrupted(format!(
            "the node running turn {} stopped before it finished; its message is kept in the history",
            record.id
        )))),
        TurnStatus::Failed => Some(Err(Error::Remote {
            node: "another node".to_owned(),
            code: flynn_protocol::ErrorCode::Internal,
            message: format!(
                "turn {} failed (its events did not reach this node; the session's history has what was stored)",
                record.id
            ),
        })),
        TurnStatus::Completed => {
            let after = record.message_seq.unwrap_or_default();
            let reply = match shared.store.history_since(&record.session, after).await {
                Ok(messages) => messages
                    .iter()
                    .rev()
                    .find(|m| {
                        m.turn == Some(record.id)
                            && m.message.role == flynn_protocol::Role::Assistant
                    })
                    .map(|m| m.message.text())
                    .unwrap_or_default(),
                Err(error) => return Some(Err(error.into())),
            };
            Some(Ok(TurnOutcome::command_reply(reply)))
        }
    }
}
