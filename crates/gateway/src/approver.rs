//! The approver for turns started over the gateway: a tool call that
//! needs confirmation waits here until a client answers it with
//! `confirmations.resolve` (the gate denies it when its time runs out or
//! the turn is cancelled).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use flynn_protocol::SessionKey;
use flynn_tools::{ApprovalRequest, Approver, Decision};
use tokio::sync::oneshot;

use crate::api::PendingConfirmation;

/// Tool calls waiting for a person, shared by every client of a gateway.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct RemoteApprover {
    pending: Arc<Mutex<BTreeMap<(String, String), Waiting>>>,
}

impl std::fmt::Debug for RemoteApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteApprover")
            .field("pending", &self.len())
            .finish()
    }
}

struct Waiting {
    request: ApprovalRequest,
    expires_at: i64,
    answer: oneshot::Sender<Decision>,
}

/// Why a confirmation could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// No call with this id waits (answered already, timed out, or never
    /// asked).
    Unknown,
}

impl RemoteApprover {
    pub fn new() -> Self {
        RemoteApprover::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Waiting>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls waiting now, oldest id first.
    pub fn list(&self) -> Vec<PendingConfirmation> {
        self.lock()
            .iter()
            .filter(|(_, waiting)| !waiting.answer.is_closed())
            .map(|((_, id), waiting)| PendingConfirmation {
                id: id.clone(),
                session: waiting.request.session.clone(),
                turn: waiting.request.turn,
                agent: waiting.request.agent.clone(),
                tool: waiting.request.tool.clone(),
                input: waiting.request.input.clone(),
                effect: waiting.request.effect,
                reason: waiting.request.reason.clone(),
                expires_at: waiting.expires_at,
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock()
            .values()
            .filter(|waiting| !waiting.answer.is_closed())
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Answers one waiting call of a session.
    pub fn resolve(
        &self,
        session: &SessionKey,
        id: &str,
        decision: Decision,
    ) -> Result<(), ResolveError> {
        let key = (session.to_string(), id.to_owned());
        let waiting = self.lock().remove(&key).ok_or(ResolveError::Unknown)?;
        waiting
            .answer
            .send(decision)
            .map_err(|_| ResolveError::Unknown)
    }
}

#[async_trait]
impl Approver for RemoteApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Decision {
        let (tx, rx) = oneshot::channel();
        let expires_at = now_millis()
            .saturating_add(i64::try_from(request.timeout.as_millis()).unwrap_or(i64::MAX));
        let key = (request.session.to_string(), request.call_id.clone());
        self.lock().insert(
            key.clone(),
            Waiting {
                request: request.clone(),
                expires_at,
                answer: tx,
            },
        );
        // The gate drops this future on timeout or cancellation; the guard
        // takes the call off the list then.
        let _unlist = Unlist {
            approver: self,
            key: &key,
        };
        rx.await.unwrap_or_else(|_| Decision::Deny {
            reason: "the confirmation was withdrawn".to_owned(),
        })
    }
}

struct Unlist<'a> {
    approver: &'a RemoteApprover,
    key: &'a (String, String),
}

impl Drop for Unlist<'_> {
    fn drop(&mut self) {
        self.approver.lock().remove(self.key);
    }
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
