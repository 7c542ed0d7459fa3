//! The approver for turns started over the gateway: a tool call that
//! needs confirmation waits here until a client answers it with
//! `confirmations.resolve` (the gate denies it when its time runs out or
//! the turn is cancelled).
//!
//! Each waiting call gets an id of the server's own (128 random bits), not
//! the model's call id (a model may reuse those), and the SHA-256 of its
//! input: an answer naming the digest of the input a person was shown is
//! refused when the waiting call's input is another.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use flynn_protocol::SessionKey;
use flynn_tools::{ApprovalRequest, Approver, Decision};
use tokio::sync::oneshot;

use crate::api::PendingConfirmation;
pub(crate) use flynn_protocol::clock::now_millis;

/// Tool calls waiting for a person, shared by every client of a gateway.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct RemoteApprover {
    /// By server id.
    pending: Arc<Mutex<BTreeMap<String, Waiting>>>,
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
    digest: String,
    /// Unix milliseconds; an answer after it is refused.
    expires_at: i64,
    /// Order of arrival, for listing.
    seq: u64,
    answer: oneshot::Sender<Decision>,
}

/// Why a confirmation could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// No call with this id waits (answered already, timed out, or never
    /// asked).
    Unknown,
    /// The model's call id names more than one waiting call of the
    /// session: the server's id is needed.
    Ambiguous,
    /// The waiting call's input is not the one whose digest was given.
    InputChanged,
}

/// The SHA-256 (hex) of a call's input as the server serialises it: what
/// `confirmations.list` gives as `input_digest`.
pub fn input_digest(input: &serde_json::Value) -> String {
    use sha2::Digest;
    let bytes = serde_json::to_vec(input).unwrap_or_default();
    hex::encode(sha2::Sha256::digest(&bytes))
}

fn new_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: still unique, if guessable.
        return format!("c{}", uuid::Uuid::now_v7().simple());
    }
    format!("c{}", hex::encode(bytes))
}

impl RemoteApprover {
    pub fn new() -> Self {
        RemoteApprover::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Waiting>> {
        flynn_protocol::sync::lock(&self.pending)
    }

    /// Calls waiting now, oldest first.
    pub fn list(&self) -> Vec<PendingConfirmation> {
        let now = now_millis();
        let pending = self.lock();
        let mut waiting: Vec<(&String, &Waiting)> = pending
            .iter()
            .filter(|(_, waiting)| !waiting.answer.is_closed() && waiting.expires_at > now)
            .collect();
        waiting.sort_by_key(|(_, waiting)| waiting.seq);
        waiting
            .into_iter()
            .map(|(id, waiting)| PendingConfirmation {
                id: id.clone(),
                call_id: waiting.request.call_id.clone(),
                session: waiting.request.session.clone(),
                turn: waiting.request.turn,
                agent: waiting.request.agent.clone(),
                tool: waiting.request.tool.clone(),
                input: waiting.request.input.clone(),
                input_digest: waiting.digest.clone(),
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

    /// Answers one waiting call of a session: `id` is the server's id (or,
    /// for older clients, the model's call id when only one waiting call
    /// of the session has it); with `digest`, only if the call's input is
    /// that one.
    pub fn resolve(
        &self,
        session: &SessionKey,
        id: &str,
        digest: Option<&str>,
        decision: Decision,
    ) -> Result<(), ResolveError> {
        let now = now_millis();
        let mut pending = self.lock();
        let key = if pending
            .get(id)
            .is_some_and(|waiting| waiting.request.session == *session)
        {
            id.to_owned()
        } else {
            let mut by_call = pending
                .iter()
                .filter(|(_, w)| w.request.session == *session && w.request.call_id == id)
                .map(|(key, _)| key.clone());
            match (by_call.next(), by_call.next()) {
                (Some(key), None) => key,
                (Some(_), Some(_)) => return Err(ResolveError::Ambiguous),
                (None, _) => return Err(ResolveError::Unknown),
            }
        };
        let Some(waiting) = pending.get(&key) else {
            return Err(ResolveError::Unknown);
        };
        if waiting.expires_at <= now {
            return Err(ResolveError::Unknown);
        }
        if let Some(digest) = digest
            && !digest.eq_ignore_ascii_case(&waiting.digest)
        {
            return Err(ResolveError::InputChanged);
        }
        let waiting = pending.remove(&key).ok_or(ResolveError::Unknown)?;
        drop(pending);
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
        let key = new_id();
        {
            let mut pending = self.lock();
            let seq = pending.values().map(|w| w.seq + 1).max().unwrap_or(0);
            pending.insert(
                key.clone(),
                Waiting {
                    request: request.clone(),
                    digest: input_digest(&request.input),
                    expires_at,
                    seq,
                    answer: tx,
                },
            );
        }
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
    key: &'a String,
}

impl Drop for Unlist<'_> {
    fn drop(&mut self) {
        self.approver.lock().remove(self.key);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use flynn_protocol::ToolEffect;
    use serde_json::json;

    use super::*;

    fn request(call_id: &str, command: &str) -> ApprovalRequest {
        ApprovalRequest {
            session: "web:a".parse().unwrap(),
            agent: "main".into(),
            turn: None,
            call_id: call_id.into(),
            tool: "shell.exec".into(),
            input: json!({"command": command}),
            effect: ToolEffect::RunsProcesses,
            timeout: Duration::from_secs(60),
            reason: None,
        }
    }

    async fn waiting(approver: &RemoteApprover, count: usize) -> Vec<PendingConfirmation> {
        for _ in 0..100 {
            let list = approver.list();
            if list.len() == count {
                return list;
            }
            tokio::task::yield_now().await;
        }
        approver.list()
    }

    #[tokio::test]
    async fn a_reused_call_id_cannot_swap_what_is_approved() {
        let approver = RemoteApprover::new();
        let session: SessionKey = "web:a".parse().unwrap();
        let first = tokio::spawn({
            let approver = approver.clone();
            async move { approver.approve(&request("call_0", "echo hi")).await }
        });
        let second = tokio::spawn({
            let approver = approver.clone();
            async move { approver.approve(&request("call_0", "rm -rf ~")).await }
        });
        let list = waiting(&approver, 2).await;
        assert_eq!(
            list.len(),
            2,
            "both wait: the second did not replace the first"
        );
        assert!(list.iter().all(|c| c.id != "call_0" && c.id.len() == 33));
        assert_ne!(list[0].id, list[1].id);
        // The model's id names both: refused.
        assert_eq!(
            approver.resolve(&session, "call_0", None, Decision::Approve),
            Err(ResolveError::Ambiguous)
        );
        let harmless = list
            .iter()
            .find(|c| c.input["command"] == "echo hi")
            .unwrap();
        let harmful = list
            .iter()
            .find(|c| c.input["command"] == "rm -rf ~")
            .unwrap();
        // Approving by id with the digest of another input: refused.
        assert_eq!(
            approver.resolve(
                &session,
                &harmful.id,
                Some(&harmless.input_digest),
                Decision::Approve
            ),
            Err(ResolveError::InputChanged)
        );
        approver
            .resolve(
                &session,
                &harmless.id,
                Some(&harmless.input_digest),
                Decision::Approve,
            )
            .unwrap();
        approver
            .resolve(
                &session,
                &harmful.id,
                None,
                Decision::Deny {
                    reason: "no".into(),
                },
            )
            .unwrap();
        assert_eq!(first.await.unwrap(), Decision::Approve);
        assert_eq!(
            second.await.unwrap(),
            Decision::Deny {
                reason: "no".into()
            }
        );
        // Another session's id does not resolve here.
        assert_eq!(
            approver.resolve(
                &"web:b".parse().unwrap(),
                &harmless.id,
                None,
                Decision::Approve
            ),
            Err(ResolveError::Unknown)
        );
    }
}
