//! `flynn send` through a running daemon: the same output, JSON and exit
//! codes as embedded mode, over the gateway's `agent.send`.

use std::sync::Arc;
use std::time::Duration;

use flynn_api::methods::{AgentCancel, ConfirmationsResolve};
use flynn_api::{Approval, CancelParams, Method, Notification, ResolveParams, SendParams};
use flynn_client::{Client, Error as ClientError};
use flynn_core::{AgentEvent, ApprovalRequest, Decision, ErrorCode, RunState, SessionKey};
use futures::StreamExt;
use serde_json::json;

use crate::exit::Failure;

/// Where the daemon is and how to prove who we are.
#[derive(Debug, Clone)]
pub struct Target {
    /// `ws://host:port/rpc`.
    pub url: String,
    pub token: Option<String>,
}

/// The daemon named by `--gateway` or `FLYNN_GATEWAY_URL`, if any, with
/// the token from `FLYNN_GATEWAY_TOKEN` or `FLYNN_HOME/gateway.token`.
pub fn target(
    flag: Option<&str>,
    config: Option<&std::path::Path>,
) -> Result<Option<Target>, Failure> {
    let named = flag
        .map(str::to_owned)
        .or_else(|| std::env::var("FLYNN_GATEWAY_URL").ok())
        .filter(|u| !u.trim().is_empty());
    let Some(url) = named else {
        return Ok(None);
    };
    let url = flynn_client::rpc_url(&url).map_err(Failure::usage)?;
    let paths = flynn_core::config::Paths::resolve(config, &crate::env::CliEnv)?;
    let token = flynn_client::client_token(
        std::env::var("FLYNN_GATEWAY_TOKEN").ok().as_deref(),
        &paths.home,
    );
    Ok(Some(Target { url, token }))
}

fn unreachable(target: &Target, error: impl std::fmt::Display) -> Failure {
    Failure {
        code: 4,
        message: format!("cannot reach the daemon at {}: {error}", target.url),
    }
}

pub async fn connect(target: &Target) -> Result<Client, Failure> {
    Client::connect(&target.url, target.token.as_deref())
        .await
        .map_err(|error| match error {
            ClientError::Unauthorized { .. } => Failure {
                code: 4,
                message: format!(
                    "the daemon at {} refused the token (set FLYNN_GATEWAY_TOKEN, or run where FLYNN_HOME holds gateway.token)",
                    target.url
                ),
            },
            ClientError::Unreachable { reason, .. } => unreachable(target, reason),
            other => unreachable(target, other),
        })
}

/// One method call on the daemon; an error becomes the exit code and
/// message embedded mode would give.
pub async fn call<M: Method>(
    target: &Target,
    client: &Client,
    params: &M::Params,
) -> Result<M::Output, Failure> {
    client
        .call::<M>(params)
        .await
        .map_err(|error| failure(target, error).1)
}

/// The exit code and message of an error from the daemon.
pub fn failure(target: &Target, error: ClientError) -> (ErrorCode, Failure) {
    match error {
        ClientError::Rpc(rpc) => {
            let code = match rpc.kind.as_deref().unwrap_or_default() {
                "config" | "invalid_params" => ErrorCode::Config,
                "provider" => ErrorCode::Provider,
                "storage" => ErrorCode::Storage,
                "cancelled" => ErrorCode::Cancelled,
                "refused" | "shutting_down" | "rate_limited" => ErrorCode::Refused,
                _ => ErrorCode::Internal,
            };
            (code, Failure::from_code(code, rpc.message))
        }
        other => (ErrorCode::Refused, unreachable(target, other)),
    }
}

/// Sends one message and prints the turn like embedded mode does.
pub async fn send(
    target: &Target,
    params: SendParams,
    yes: bool,
    printer: &mut crate::send::Printer,
    json_output: bool,
) -> Result<(), Failure> {
    let client = Arc::new(connect(target).await?);
    let session = params.session.clone();
    let approver = crate::approve::for_run(yes);
    let mut params = params;
    params.approval = if yes {
        Approval::ApproveAll
    } else if crate::approve::interactive() {
        Approval::Ask
    } else {
        Approval::Deny
    };
    let mut sub = match client.follow(&params).await {
        Ok(sub) => sub,
        Err(error) => {
            let (code, failure) = failure(target, error);
            print_error(json_output, &session, code, &failure.message);
            return Err(failure);
        }
    };
    let mut turn = None;
    let mut outcome = None;
    let mut ended_with: Option<(ErrorCode, String)> = None;
    let mut cancelled = false;
    loop {
        let next = tokio::select! {
            next = sub.next() => next,
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                let params = CancelParams { session: session.clone(), turn };
                let _ = client.call::<AgentCancel>(&params).await;
                continue;
            }
        };
        let Some(next) = next else {
            let failure = unreachable(target, "the connection closed before the turn ended");
            print_error(json_output, &session, ErrorCode::Refused, &failure.message);
            return Err(failure);
        };
        let notification = match next {
            Ok(n) => n,
            Err(error) => {
                let failure = unreachable(target, error);
                return Err(failure);
            }
        };
        let envelope = match notification {
            Notification::Event(envelope) => *envelope,
            Notification::Lagged { skipped, .. } => {
                printer.event(AgentEvent::Warning {
                    message: format!("{skipped} events were skipped: this client fell behind"),
                });
                continue;
            }
        };
        if turn.is_none() {
            turn = envelope.turn;
        }
        match &envelope.event {
            AgentEvent::ConfirmationRequested {
                id,
                name,
                input,
                effect,
                timeout_secs,
                reason,
            } => {
                let request = ApprovalRequest {
                    session: envelope.session.clone(),
                    agent: String::new(),
                    turn: envelope.turn,
                    call_id: id.clone(),
                    tool: name.clone(),
                    input: input.clone(),
                    effect: *effect,
                    timeout: Duration::from_secs(*timeout_secs),
                    reason: reason.clone(),
                };
                let approver = approver.clone();
                let client = client.clone();
                tokio::spawn(async move {
                    let decision = approver.approve(&request).await;
                    let (approve, reason) = match decision {
                        Decision::Approve => (true, None),
                        Decision::Deny { reason } => (false, Some(reason)),
                    };
                    let params = ResolveParams {
                        session: request.session,
                        id: request.call_id,
                        approve,
                        input_digest: None,
                        reason,
                    };
                    let _ = client.call::<ConfirmationsResolve>(&params).await;
                });
            }
            AgentEvent::Done { outcome: done } => outcome = Some(done.clone()),
            AgentEvent::Error { code, message } => ended_with = Some((*code, message.clone())),
            _ => {}
        }
        let end = match &envelope.event {
            AgentEvent::RunState { state } => match state {
                RunState::Complete => true,
                RunState::Cancelled => {
                    ended_with.get_or_insert((ErrorCode::Cancelled, "cancelled".to_owned()));
                    true
                }
                RunState::Error => true,
                _ => false,
            },
            AgentEvent::Command { reply, .. } if envelope.turn.is_none() => {
                outcome = Some(flynn_core::TurnOutcome::command_reply(reply.clone()));
                true
            }
            _ => false,
        };
        printer.event(envelope.event);
        if end {
            break;
        }
    }
    match (ended_with, outcome) {
        (None, Some(outcome)) => {
            printer.finish(&session, &outcome);
            Ok(())
        }
        (Some((code, message)), _) => {
            print_error(json_output, &session, code, &message);
            printer.end_line();
            Err(Failure::from_code(code, message))
        }
        (None, None) => Err(Failure::other("the turn ended without an answer")),
    }
}

fn print_error(json_output: bool, session: &SessionKey, code: ErrorCode, message: &str) {
    if json_output {
        let out = json!({
            "session": session.as_str(),
            "error": {"code": code, "message": message},
        });
        outln!("{out}");
    }
}
