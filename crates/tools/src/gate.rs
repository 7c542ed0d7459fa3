//! The gate every tool call passes before it runs: the agent's policy
//! ([`ToolPolicy`](crate::ToolPolicy)), then the hooks
//! ([`Hooks`](crate::Hooks), `tools.hooks`), then, for calls a hook marks
//! `confirm`, a person's answer through an [`Approver`]. The approval wait
//! happens before the tool's own timeout starts, since a person may take
//! minutes; it has its own limit (`tools.confirm_timeout_secs`) and ends
//! when the turn is cancelled.

use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{Resolution, SessionKey, ToolEffect, TurnId};

use crate::{ToolContext, ToolError};

/// A tool call waiting for a person's approval.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub session: SessionKey,
    pub agent: String,
    pub turn: Option<TurnId>,
    /// The model's id for the call (`ToolCall::id`).
    pub call_id: String,
    /// The tool's dotted name.
    pub tool: String,
    /// The call's arguments, as the model sent them.
    pub input: serde_json::Value,
    /// What the tool does to the world, as it declares it.
    pub effect: ToolEffect,
    /// How long the gate waits for an answer before it denies the call.
    pub timeout: Duration,
    /// Why this call asks when its hook and autonomy alone would not
    /// (untrusted content in the turn); `None` otherwise.
    pub reason: Option<String>,
}

/// An approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    /// The reason is shown to the model: "shell.exec was denied: {reason}".
    Deny {
        reason: String,
    },
}

/// Answers confirmation requests: a terminal prompt, a chat button,
/// `--yes`. The gate bounds the wait and stops it when the turn is
/// cancelled, so an approver may simply wait for its person.
#[async_trait]
pub trait Approver: Send + Sync {
    async fn approve(&self, request: &ApprovalRequest) -> Decision;

    /// Whether it answers without asking anyone (`--yes`): such an
    /// answer does not count for calls only a person may approve (see
    /// [`crate::taint`]).
    fn is_automatic(&self) -> bool {
        false
    }
}

/// Approves every request (`flynn send --yes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

#[async_trait]
impl Approver for ApproveAll {
    async fn approve(&self, _request: &ApprovalRequest) -> Decision {
        Decision::Approve
    }

    fn is_automatic(&self) -> bool {
        true
    }
}

/// Denies every request, giving the same reason each time (used where no
/// one is there to ask).
#[derive(Debug, Clone)]
pub struct DenyAll {
    reason: String,
}

impl DenyAll {
    pub fn new(reason: impl Into<String>) -> Self {
        DenyAll {
            reason: reason.into(),
        }
    }
}

#[async_trait]
impl Approver for DenyAll {
    async fn approve(&self, _request: &ApprovalRequest) -> Decision {
        Decision::Deny {
            reason: self.reason.clone(),
        }
    }

    fn is_automatic(&self) -> bool {
        true
    }
}

/// Told about every confirmation: `confirmation_requested` before the
/// approver is asked, then `confirmation_resolved` exactly once with how it
/// ended. The orchestrator turns these into events. Called on the call's
/// task, so implementations must not block.
pub trait GateObserver: Send + Sync {
    fn confirmation_requested(&self, request: &ApprovalRequest);
    fn confirmation_resolved(&self, request: &ApprovalRequest, resolution: Resolution);
}

/// Asks `ctx.approver` about `request`, bounded by `request.timeout` and by
/// the turn's cancellation, and reports both ends to `ctx.observer`.
/// `Ok` means the call may run.
pub(crate) async fn confirm(request: &ApprovalRequest, ctx: &ToolContext) -> Result<(), ToolError> {
    if let Some(observer) = &ctx.observer {
        observer.confirmation_requested(request);
    }
    let denied = |reason: String| ToolError::Denied {
        tool: request.tool.clone(),
        reason,
    };
    let (resolution, outcome) = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => (
            Resolution::Cancelled,
            Err(ToolError::Cancelled { tool: request.tool.clone() }),
        ),
        answer = tokio::time::timeout(request.timeout, ctx.approver.approve(request)) => match answer {
            Ok(Decision::Approve) => (Resolution::Approved, Ok(())),
            Ok(Decision::Deny { reason }) => (Resolution::Denied, Err(denied(reason))),
            Err(_elapsed) => (
                Resolution::TimedOut,
                Err(denied(format!(
                    "nobody answered within {} s",
                    request.timeout.as_secs()
                ))),
            ),
        },
    };
    if let Some(observer) = &ctx.observer {
        observer.confirmation_resolved(request, resolution);
    }
    outcome
}
