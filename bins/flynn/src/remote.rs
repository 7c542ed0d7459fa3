//! `flynn send` through a running daemon: the same output, JSON and exit
//! codes as embedded mode, over the gateway's `agent.send`.

use std::sync::Arc;
use std::time::Duration;

use flynn_core::gateway::api::{Approval, Notification, SendParams};
use flynn_core::{AgentEvent, ApprovalRequest, Decision, ErrorCode, RunState, SessionKey};
use jsonrpsee::core::client::{ClientT, Error as RpcError, Subscription, SubscriptionClientT};
use jsonrpsee::core::params::ObjectParams;
use jsonrpsee::ws_client::{WsClient, WsClientBuilder};
use serde_json::{Value, json};

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
    let url = flynn_core::gateway::client::rpc_url(&url).map_err(Failure::usage)?;
    let paths = flynn_core::config::Paths::resolve(config, &crate::env::CliEnv)?;
    let token = flynn_core::gateway::client::client_token(
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

pub async fn connect(target: &Target) -> Result<WsClient, Failure> {
    let mut headers = jsonrpsee::ws_client::HeaderMap::new();
    if let Some(token) = &target.token
        && let Ok(value) = format!("Bearer {token}").parse()
    {
        headers.insert("authorization", value);
    }
    WsClientBuilder::default()
        .set_headers(headers)
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(3600))
        .build(&target.url)
        .await
        .map_err(|e| {
            let text = e.to_string();
            if text.contains("401") {
                Failure {
                    code: 4,
                    message: format!(
                        "the daemon at {} refused the token (set FLYNN_GATEWAY_TOKEN, or run where FLYNN_HOME holds gateway.token)",
                        target.url
                    ),
                }
            } else {
                unreachable(target, text)
            }
        })
}

fn object(value: Value) -> ObjectParams {
    let mut params = ObjectParams::new();
    if let Value::Object(map) = value {
        for (key, value) in map {
            let _ = params.insert(&key, value);
        }
    }
    params
}

/// One method call on the daemon; an error becomes the exit code and
/// message embedded mode would give.
pub async fn call<T: serde::de::DeserializeOwned>(
    target: &Target,
    client: &WsClient,
    method: &str,
    params: Value,
) -> Result<T, Failure> {
    client
        .request(method, object(params))
        .await
        .map_err(|error| failure(target, error).1)
}

/// The exit code and message of an error from the daemon.
pub fn failure(target: &Target, error: RpcError) -> (ErrorCode, Failure) {
    match error {
        RpcError::Call(call) => {
            let kind = call
                .data()
                .and_then(|d| serde_json::from_str::<Value>(d.get()).ok())
                .and_then(|d| d["kind"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let code = match kind.as_str() {
                "config" | "invalid_params" => ErrorCode::Config,
                "provider" => ErrorCode::Provider,
                "storage" => ErrorCode::Storage,
                "cancelled" => ErrorCode::Cancelled,
                "refused" | "shutting_down" | "rate_limited" => ErrorCode::Refused,
                _ => ErrorCode::Internal,
            };
            (code, Failure::from_code(code, call.message().to_owned()))
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
    let body = serde_json::to_value(&params).unwrap_or(Value::Null);
    let mut sub: Subscription<Notification> = match client
        .subscribe("agent.send", object(body), "agent.unsubscribe")
        .await
    {
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
                let _ = client
                    .request::<Value, _>("agent.cancel", object(json!({"session": session, "turn": turn})))
                    .await;
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
                    let _ = client
                        .request::<Value, _>(
                            "confirmations.resolve",
                            object(json!({
                                "session": request.session,
                                "id": request.call_id,
                                "approve": approve,
                                "reason": reason,
                            })),
                        )
                        .await;
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
