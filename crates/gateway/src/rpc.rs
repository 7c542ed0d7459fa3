//! The JSON-RPC methods. Each call is counted against its client's rate
//! limit first; parameters are one JSON object (by name), validated
//! strictly (unknown fields refused).

use std::sync::Arc;
use std::time::Duration;

use flynn_orchestrator::{Followed, Submitted, TurnRequest};
use flynn_protocol::config::TokenScope;
use flynn_protocol::{
    AgentEvent, EventEnvelope, Lagged, RunState, SessionKey, TurnId, TurnOutcome,
};
use flynn_tools::{ApproveAll, Approver, Decision, DenyAll, ToolContext};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, PendingSubscriptionSink, RpcModule, SubscriptionMessage};
use serde::Serialize;
use serde::de::DeserializeOwned;

use flynn_api::methods;
use flynn_api::*;

use crate::auth::Client;
use crate::convert::{paired_sender, pairing_code, totals};
use crate::error;
use crate::server::State;

type RpcResult<T> = Result<T, ErrorObjectOwned>;

/// Every method, over the gateway's state.
pub(crate) fn methods(state: Arc<State>) -> RpcModule<State> {
    let mut module = RpcModule::from_arc(state);
    register(&mut module);
    module
}

/// Parses the parameters: one object by name (`[{...}]` too), or nothing
/// (read as `{}`, so a method whose parameters are all optional may be
/// called without them, and a missing required one is named).
pub(crate) fn parse_params<T: DeserializeOwned>(params: &Params<'_>) -> RpcResult<T> {
    if params
        .as_str()
        .is_none_or(|p| p.trim().is_empty() || p.trim() == "null")
    {
        return serde_json::from_value(serde_json::json!({}))
            .map_err(|e| error::invalid_params(format!("{e}")));
    }
    parse_required(params)
}

fn parse_required<T: DeserializeOwned>(params: &Params<'_>) -> RpcResult<T> {
    let text = params.as_str().unwrap_or("null");
    // `[{...}]` (positional, one object) is accepted like `{...}`.
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| error::invalid_params(format!("parameters are not JSON: {e}")))?;
    let value = match value {
        serde_json::Value::Array(mut items) if items.len() == 1 => items.remove(0),
        other => other,
    };
    if !value.is_object() {
        return Err(error::invalid_params(
            "expected the parameters as one object with named fields",
        ));
    }
    serde_json::from_value(value).map_err(|e| error::invalid_params(format!("{e}")))
}

/// Checks the call: the client may use the method (its scope in
/// [`flynn_api::METHODS`]), and it is within its rate limit. Gives the
/// client.
fn admit(state: &State, extensions: &Extensions, method: &str) -> RpcResult<Client> {
    state.metrics.rpc_call();
    let Some(client) = extensions.get::<Client>().cloned() else {
        return Err(error::rpc_error(
            codes::FORBIDDEN,
            "forbidden",
            "the call carries no authenticated client",
        ));
    };
    let Some(needed) = flynn_api::scopes_of(method) else {
        return Err(error::rpc_error(
            codes::FORBIDDEN,
            "forbidden",
            format!("{method} declares no scope, so no token may call it"),
        ));
    };
    if !needed.iter().any(|scope| client.has(*scope)) {
        return Err(forbidden_scope(&client, method, needed[0]));
    }
    state.limiter.check(&client.rate_key()).map_err(|wait| {
        ErrorObjectOwned::owned(
            codes::RATE_LIMITED,
            "too many requests from this client; slow down",
            Some(serde_json::json!({
                "kind": "rate_limited",
                "retry_after_secs": wait.as_secs().max(1),
            })),
        )
    })?;
    Ok(client)
}

fn forbidden_scope(client: &Client, what: &str, needed: TokenScope) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        codes::FORBIDDEN,
        format!(
            "{what} needs a token with the `{needed}` scope; '{}' has {}",
            client.name,
            crate::auth::scope_list(&client.scopes)
        ),
        Some(serde_json::json!({ "kind": "forbidden", "scope": needed })),
    )
}

/// Refuses a session the client does not own (writes need it).
fn own(client: &Client, session: &SessionKey) -> RpcResult<()> {
    if client.owns(session) {
        return Ok(());
    }
    Err(error::rpc_error(
        codes::FORBIDDEN,
        "forbidden",
        format!(
            "'{}' may use only its own sessions, named `{}:<anything>`, not {session} (an `admin` token may use any)",
            client.name, client.namespace
        ),
    ))
}

/// Refuses a session the client may not read.
fn readable(client: &Client, session: &SessionKey) -> RpcResult<()> {
    if client.may_read(session) {
        return Ok(());
    }
    Err(error::rpc_error(
        codes::FORBIDDEN,
        "forbidden",
        format!(
            "'{}' may read only its own sessions, named `{}:<anything>`, not {session} (a token with the `read` scope may read any)",
            client.name, client.namespace
        ),
    ))
}

/// `gateway:default` (what a client gets when it names no session)
/// stands for the client's own default session.
fn session_for(client: &Client, session: SessionKey) -> SessionKey {
    if session == default_session() {
        client.default_session()
    } else {
        session
    }
}

fn register(module: &mut RpcModule<State>) {
    // Names are static and unique, so registration cannot fail; a clash
    // would be a programming error caught by the method list test.
    // Each handler takes the method's parameters and answers its output,
    // as flynn-api declares them.
    macro_rules! method {
        ($method:ty, $handler:expr) => {{
            let name = <$method as Method>::NAME;
            let _ =
                module.register_async_method(name, move |params, state, extensions| async move {
                    admit(&state, &extensions, name)?;
                    let params: <$method as Method>::Params = parse_params(&params)?;
                    let output: <$method as Method>::Output = $handler(params, state).await?;
                    RpcResult::Ok(output)
                });
        }};
        ($method:ty, $handler:expr, client) => {{
            let name = <$method as Method>::NAME;
            let _ =
                module.register_async_method(name, move |params, state, extensions| async move {
                    let client = admit(&state, &extensions, name)?;
                    let params: <$method as Method>::Params = parse_params(&params)?;
                    let output: <$method as Method>::Output =
                        $handler(params, state, client).await?;
                    RpcResult::Ok(output)
                });
        }};
    }

    method!(methods::AgentCancel, cancel, client);
    method!(methods::AgentStatus, status, client);
    method!(methods::SessionsList, sessions_list, client);
    method!(methods::SessionsHistory, sessions_history, client);
    method!(methods::SessionsSend, sessions_send, client);
    method!(methods::SessionsReset, sessions_reset, client);
    method!(methods::ToolsList, tools_list);
    method!(methods::ToolsInvoke, tools_invoke, client);
    method!(methods::ConfirmationsList, confirmations_list);
    method!(methods::ConfirmationsResolve, confirmations_resolve, client);
    method!(methods::ConfigGet, config_get);
    method!(methods::ConfigPatch, config_patch, client);
    method!(methods::UsageSummary, usage_summary, client);
    method!(methods::SystemHealth, system_health);
    method!(methods::SystemVersion, system_version, client);
    method!(methods::SystemRestart, system_restart, client);
    method!(methods::SystemLogs, system_logs);
    method!(methods::ProvidersStatus, providers_status);
    method!(methods::ChannelsStatus, channels_status);
    method!(methods::ClusterStatus, cluster_status);
    method!(methods::McpStatus, mcp_status);
    method!(methods::PairingList, pairing_list);
    method!(methods::PairingApprove, pairing_approve, client);
    method!(methods::PairingRevoke, pairing_revoke, client);

    let _ = module.register_subscription(
        methods::AgentSend::NAME,
        methods::AgentSend::NOTIFICATION,
        methods::AgentSend::UNSUBSCRIBE,
        |params, pending, state, extensions| async move {
            let client = match admit(&state, &extensions, methods::AgentSend::NAME) {
                Ok(client) => client,
                Err(error) => return pending.reject(error).await,
            };
            agent_send(params, pending, state, client).await;
        },
    );
    let _ = module.register_subscription(
        methods::SessionsSubscribe::NAME,
        methods::SessionsSubscribe::NOTIFICATION,
        methods::SessionsSubscribe::UNSUBSCRIBE,
        |params, pending, state, extensions| async move {
            let client = match admit(&state, &extensions, methods::SessionsSubscribe::NAME) {
                Ok(client) => client,
                Err(error) => return pending.reject(error).await,
            };
            sessions_subscribe(params, pending, state, client).await;
        },
    );
}

fn json<T: Serialize>(value: &T) -> SubscriptionMessage {
    let raw = serde_json::value::to_raw_value(value)
        .unwrap_or_else(|_| serde_json::value::RawValue::NULL.to_owned());
    SubscriptionMessage::from(raw)
}

fn notification(
    event: Result<EventEnvelope, Lagged>,
    session: Option<&SessionKey>,
) -> Notification {
    match event {
        Ok(envelope) => Notification::Event(Box::new(envelope)),
        Err(lagged) => Notification::Lagged {
            session: session.cloned(),
            skipped: lagged.skipped,
        },
    }
}

fn turn_request(state: &State, client: &Client, params: SendParams) -> RpcResult<TurnRequest> {
    own(client, &params.session)?;
    if params.approval == Approval::ApproveAll && !client.is_admin() {
        return Err(forbidden_scope(
            client,
            "`approval: approve_all` (approving every tool call unasked)",
            TokenScope::Admin,
        ));
    }
    if params.message.trim().is_empty() {
        return Err(error::rpc_error(
            codes::REFUSED,
            "refused",
            "the message is empty (expected some text)",
        ));
    }
    let mut request = TurnRequest::text(params.session, params.message);
    request.principal = client.turn_principal();
    request.tier = params.tier;
    request.model = params.model;
    request.agent = params.agent;
    let approver: Arc<dyn Approver> = match params.approval {
        Approval::Ask => Arc::new(state.approver.clone()),
        Approval::ApproveAll => Arc::new(ApproveAll),
        Approval::Deny => Arc::new(DenyAll::new(
            "the client that sent the message denies calls that need confirmation",
        )),
    };
    request.approver = Some(approver);
    Ok(request)
}

/// `agent.send`: accepts the message, then streams the turn's events;
/// the last is a `run_state` of `complete`, `cancelled` or `error` (or,
/// for a chat command, the `command` event).
async fn agent_send(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    state: Arc<State>,
    client: Client,
) {
    let mut params: SendParams = match parse_params(&params) {
        Ok(params) => params,
        Err(error) => return pending.reject(error).await,
    };
    params.session = session_for(&client, params.session);
    let session = params.session.clone();
    let request = match turn_request(&state, &client, params) {
        Ok(request) => request,
        Err(error) => return pending.reject(error).await,
    };
    let followed = match state.manager.submit_and_follow(request).await {
        Ok(followed) => followed,
        Err(error) => return pending.reject(error::from_orchestrator(&error)).await,
    };
    let Ok(sink) = pending.accept().await else {
        return;
    };
    let mut turn = match followed {
        Followed::Turn(turn) => turn,
        Followed::Command { name, reply, event } => {
            let envelope = event.unwrap_or_else(|| EventEnvelope {
                session: session.clone(),
                turn: None,
                seq: 0,
                time_ms: crate::approver::now_millis(),
                event: AgentEvent::Command { name, reply },
            });
            let _ = sink
                .send(json(&Notification::Event(Box::new(envelope))))
                .await;
            return;
        }
    };
    loop {
        let event = tokio::select! {
            () = sink.closed() => return,
            event = turn.next() => event,
        };
        let Some(event) = event else { break };
        if sink
            .send(json(&notification(event, Some(&session))))
            .await
            .is_err()
        {
            return;
        }
    }
    if turn.end_seen() {
        return;
    }
    // The turn's terminal events were lost to lag (a client that fell
    // behind): they are made from its outcome.
    let id = turn.turn();
    let result = turn.outcome().await;
    for event in ending(&result) {
        let envelope = EventEnvelope {
            session: session.clone(),
            turn: Some(id),
            seq: 0,
            time_ms: crate::approver::now_millis(),
            event,
        };
        if sink
            .send(json(&Notification::Event(Box::new(envelope))))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The events a turn ends with, as its lane publishes them.
fn ending(result: &flynn_orchestrator::Result<TurnOutcome>) -> Vec<AgentEvent> {
    match result {
        Ok(outcome) => vec![
            AgentEvent::Done {
                outcome: outcome.clone(),
            },
            AgentEvent::RunState {
                state: RunState::Complete,
            },
        ],
        Err(flynn_orchestrator::Error::Cancelled) => vec![AgentEvent::RunState {
            state: RunState::Cancelled,
        }],
        Err(error) => vec![
            AgentEvent::Error {
                code: error.code(),
                message: error.to_string(),
            },
            AgentEvent::RunState {
                state: RunState::Error,
            },
        ],
    }
}

/// `sessions.subscribe`: every event of the named sessions (or of all).
async fn sessions_subscribe(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    state: Arc<State>,
    client: Client,
) {
    let params: SubscribeParams = match parse_params(&params) {
        Ok(params) => params,
        Err(error) => return pending.reject(error).await,
    };
    if let Some(error) = params
        .sessions
        .iter()
        .find_map(|session| readable(&client, session).err())
    {
        return pending.reject(error).await;
    }
    // Without `read`, "every session" means every session of its own.
    let all_own = params.sessions.is_empty() && !client.has(TokenScope::Read);
    let mut events = if params.sessions.len() == 1 {
        state.manager.subscribe(&params.sessions[0])
    } else {
        state.manager.subscribe_all()
    };
    let Ok(sink) = pending.accept().await else {
        return;
    };
    let wanted = params.sessions;
    loop {
        tokio::select! {
            () = sink.closed() => return,
            event = events.next() => {
                let Some(event) = event else { return };
                if let Ok(envelope) = &event
                    && ((!wanted.is_empty() && !wanted.contains(&envelope.session))
                        || (all_own && !client.owns(&envelope.session)))
                {
                    continue;
                }
                // A lag note without a session could tell of others' events:
                // fine, it carries only a count.
                let only = (wanted.len() == 1).then(|| &wanted[0]);
                if sink.send(json(&notification(event, only))).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn cancel(
    params: CancelParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<CancelResult> {
    own(&client, &params.session)?;
    let cancelled = match params.turn {
        Some(turn) => state.manager.cancel_turn(&params.session, turn).await,
        None => state.manager.cancel_anywhere(&params.session).await,
    };
    Ok(CancelResult { cancelled })
}

async fn status(
    params: StatusParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<StatusResult> {
    if let Some(session) = &params.session {
        readable(&client, session)?;
    }
    let running = state
        .manager
        .running()
        .into_iter()
        .filter(|(session, _)| client.may_read(session))
        .filter(|(session, _)| params.session.as_ref().is_none_or(|s| s == session))
        .map(|(session, turn)| RunningTurn { session, turn })
        .collect();
    let open = state
        .manager
        .store()
        .open_turns(params.session.as_ref())
        .await
        .map_err(|e| error::storage(&e))?;
    Ok(StatusResult {
        active_sessions: state.manager.active_lanes(),
        running,
        open_turns: open
            .into_iter()
            .filter(|turn| client.may_read(&turn.session))
            .map(|turn| OpenTurn {
                session: turn.session,
                turn: turn.id,
                status: turn.status.as_str().to_owned(),
                agent: turn.origin.agent,
                created_at: turn.created_at,
            })
            .collect(),
        draining: state.manager.is_draining(),
    })
}

async fn sessions_list(
    _params: NoParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<Vec<SessionSummary>> {
    let sessions = state
        .manager
        .store()
        .list()
        .await
        .map_err(|e| error::storage(&e))?;
    Ok(sessions
        .into_iter()
        .filter(|info| client.may_read(&info.key))
        .map(|info| SessionSummary {
            key: info.key,
            message_count: info.message_count,
            created_at: info.created_at,
            updated_at: info.updated_at,
            agent: info.meta.agent,
            tier: info.meta.tier,
            model: info.meta.model.map(|m| m.to_string()),
            title: info.meta.title,
            last_channel: info.meta.last_channel,
        })
        .collect())
}

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

async fn sessions_history(
    params: HistoryParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<HistoryResult> {
    readable(&client, &params.session)?;
    let store = state.manager.store();
    let limit = params.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    if params.before.is_some() && params.after.is_some() {
        return Err(error::invalid_params(
            "give `before` (an older page) or `after` (what came since), not both",
        ));
    }
    let (messages, more_before) = if let Some(after) = params.after {
        let mut messages = store
            .history_since(&params.session, after)
            .await
            .map_err(|e| error::storage(&e))?;
        messages.truncate(limit);
        (messages, false)
    } else {
        // One more than asked tells whether older messages exist.
        let mut page = store
            .history_page(&params.session, params.before, limit + 1)
            .await
            .map_err(|e| match e {
                flynn_sessions::Error::UnknownMessage { .. } => error::not_found(format!(
                    "message {} is not in {}'s history",
                    params.before.unwrap_or_default(),
                    params.session
                )),
                other => error::storage(&other),
            })?;
        let more = page.len() > limit;
        if more {
            page.remove(0);
        }
        (page, more)
    };
    let cursor = messages.iter().map(|m| m.seq).max();
    let mut turns: Vec<TurnId> = messages.iter().filter_map(|m| m.turn).collect();
    turns.sort_unstable();
    turns.dedup();
    let files = state
        .manager
        .media()
        .of_turns(&params.session, &turns)
        .await
        .map_err(|e| error::storage(&e))?
        .into_iter()
        .filter_map(|stored| {
            stored.turn.map(|turn| HistoryFile {
                turn,
                file: stored.file,
            })
        })
        .collect();
    Ok(HistoryResult {
        session: params.session,
        files,
        messages: messages
            .into_iter()
            .map(|m| HistoryMessage {
                seq: m.seq,
                turn: m.turn,
                created_at: m.created_at,
                message: m.message,
                principal: m.principal,
            })
            .collect(),
        cursor,
        more_before,
    })
}

/// `sessions.send`: like `agent.send`, answering once the turn is over.
async fn sessions_send(
    mut params: SendParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<SendResult> {
    params.session = session_for(&client, params.session);
    let session = params.session.clone();
    let request = turn_request(&state, &client, params)?;
    match state
        .manager
        .submit(request)
        .await
        .map_err(|e| error::from_orchestrator(&e))?
    {
        Submitted::Command { name, reply } => Ok(SendResult {
            session,
            turn: None,
            command: Some(name),
            outcome: TurnOutcome::command_reply(reply),
        }),
        Submitted::Turn(handle) => {
            let turn = handle.turn;
            let outcome = handle
                .outcome()
                .await
                .map_err(|e| error::from_orchestrator(&e))?;
            Ok(SendResult {
                session,
                turn: Some(turn),
                command: None,
                outcome,
            })
        }
    }
}

async fn sessions_reset(
    params: SessionParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<ResetResult> {
    own(&client, &params.session)?;
    // Through the lane, so a running turn stops before the history goes.
    let existed = state
        .manager
        .reset(&params.session)
        .await
        .map_err(|e| error::from_orchestrator(&e))?;
    Ok(ResetResult { existed })
}

fn agent_of<'a>(
    state: &'a State,
    name: Option<&str>,
) -> RpcResult<&'a Arc<flynn_orchestrator::AgentProfile>> {
    match name {
        Some(name) => state
            .manager
            .agents()
            .lookup(name, "agent")
            .map_err(|e| error::not_found(e.to_string())),
        None => Ok(state.manager.agents().default_agent()),
    }
}

async fn tools_list(params: ToolsListParams, state: Arc<State>) -> RpcResult<Vec<ToolInfo>> {
    let agent = agent_of(&state, params.agent.as_deref())?;
    let executor = state.manager.executor();
    let mut tools: Vec<ToolInfo> = executor
        .registry()
        .tools()
        .iter()
        .map(|tool| ToolInfo {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            effect: tool.effect(),
            allowed: agent.policy.permits(tool.as_ref()),
            needs_confirmation: executor.needs_confirmation(tool.name()),
            input_schema: serde_json::Value::clone(&tool.input_schema()),
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tools)
}

async fn tools_invoke(
    params: InvokeParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<InvokeResult> {
    // Approving a call unasked is the owner's alone, whatever the table
    // says of tools.invoke.
    if params.confirm && !client.is_admin() {
        return Err(forbidden_scope(
            &client,
            "tools.invoke with `confirm: true`",
            TokenScope::Admin,
        ));
    }
    if let Some(session) = &params.session {
        own(&client, session)?;
    }
    let agent = agent_of(&state, params.agent.as_deref())?;
    if state
        .manager
        .executor()
        .registry()
        .get(&params.name)
        .is_none()
    {
        return Err(error::not_found(format!(
            "no tool named '{}' (see tools.list)",
            params.name
        )));
    }
    let mut ctx = ToolContext::new(agent.workspace());
    ctx.session = match params.session {
        Some(session) => session,
        None => SessionKey::new("gateway", "tools")
            .unwrap_or_else(|_| unreachable!("`gateway:tools` is a valid session key")),
    };
    ctx.agent = agent.name.clone();
    ctx.policy = agent.policy.clone();
    ctx.approver = if params.confirm {
        Arc::new(ApproveAll)
    } else {
        Arc::new(DenyAll::new(
            "it needs confirmation: call tools.invoke with `confirm: true` to run it",
        ))
    };
    let call = flynn_protocol::ToolCall {
        id: format!("invoke-{}", uuid::Uuid::now_v7().simple()),
        name: params.name,
        arguments: params.input,
    };
    let result = state.manager.executor().execute(&call, &ctx).await;
    Ok(InvokeResult {
        ok: !result.is_error,
        output: result.content,
    })
}

async fn confirmations_list(
    _params: NoParams,
    state: Arc<State>,
) -> RpcResult<Vec<PendingConfirmation>> {
    Ok(state.approver.list())
}

async fn confirmations_resolve(
    params: ResolveParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<ResolveResult> {
    let decision = if params.approve {
        Decision::Approve
    } else {
        Decision::Deny {
            reason: params
                .reason
                .unwrap_or_else(|| "the person denied it".to_owned()),
        }
    };
    state
        .approver
        .resolve(
            &params.session,
            &params.id,
            params.input_digest.as_deref(),
            decision,
        )
        .map_err(|e| match e {
            crate::ResolveError::Unknown => error::not_found(format!(
                "no tool call '{}' of {} waits for confirmation (it was answered, timed out or cancelled)",
                params.id, params.session
            )),
            crate::ResolveError::Ambiguous => error::rpc_error(
                codes::REFUSED,
                "refused",
                format!(
                    "more than one waiting call of {} has the model's id '{}': answer with the id from confirmations.list",
                    params.session, params.id
                ),
            ),
            crate::ResolveError::InputChanged => error::rpc_error(
                codes::REFUSED,
                "refused",
                "the waiting call's input is not the one shown (input_digest differs): list the confirmations again",
            ),
        })?;
    tracing::info!(
        session = %params.session,
        id = %params.id,
        approve = params.approve,
        by = %client.principal,
        "confirmation answered"
    );
    Ok(ResolveResult {
        resolution: if params.approve {
            flynn_protocol::Resolution::Approved
        } else {
            flynn_protocol::Resolution::Denied
        },
    })
}

async fn config_get(params: ConfigGetParams, state: Arc<State>) -> RpcResult<serde_json::Value> {
    let value = flynn_config::masked(&state.config);
    flynn_config::lookup(&value, &params.path)
        .cloned()
        .map_err(|e| error::not_found(e.to_string()))
}

async fn config_patch(
    params: ConfigPatchParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<ConfigPatchResult> {
    let sensitive: Vec<String> = params
        .set
        .iter()
        .filter(|change| crate::audit::security_sensitive(&change.path))
        .map(|change| change.path.clone())
        .collect();
    // The table says admin already; a security setting stays the
    // owner's even if that ever changes.
    if !sensitive.is_empty() && !client.is_admin() {
        return Err(forbidden_scope(
            &client,
            &format!("changing {}", sensitive.join(", ")),
            TokenScope::Admin,
        ));
    }
    let Some(file) = &state.config_file else {
        return Err(error::rpc_error(
            codes::CONFIG,
            "config",
            "the daemon runs without a config file (from the environment); write one first (`flynn onboard`)",
        ));
    };
    let changes: Vec<(String, serde_json::Value)> =
        params.set.into_iter().map(|s| (s.path, s.value)).collect();
    let file = file.clone();
    let audited = changes.clone();
    let result = tokio::task::spawn_blocking(move || {
        flynn_config::edit::set_in_file(&file, &changes, &flynn_config::ProcessEnv).map(|()| file)
    })
    .await
    .map_err(|e| error::internal(e.to_string()))?
    .map(|file| ConfigPatchResult {
        file: file.display().to_string(),
        restart_required: true,
    })
    .map_err(|e| error::rpc_error(codes::CONFIG, "config", e.to_string()));
    if !sensitive.is_empty() {
        crate::audit::config_change(&state, &client, &audited, result.is_ok());
    }
    result
}

async fn usage_summary(
    params: UsageParams,
    state: Arc<State>,
    _client: Client,
) -> RpcResult<UsageSummary> {
    let store = state.manager.store();
    let session = params.session.as_ref();
    let tiers = store
        .usage_by_tier(session)
        .await
        .map_err(|e| error::storage(&e))?;
    let purposes = store
        .usage_by_purpose(session)
        .await
        .map_err(|e| error::storage(&e))?;
    let mut total = flynn_sessions::UsageTotal::default();
    for (_, t) in &tiers {
        total.add(t);
    }
    let daily = match params.days {
        Some(days) => {
            let days = i64::from(days.clamp(1, 366));
            let now = chrono_day_start_ms();
            let since = now - (days - 1) * 86_400_000;
            store
                .usage_by_day(since)
                .await
                .map_err(|e| error::storage(&e))?
                .into_iter()
                .map(|line| DayUsage {
                    day: line.day,
                    tier: line.tier,
                    total: totals(&line.total),
                })
                .collect()
        }
        None => Vec::new(),
    };
    Ok(UsageSummary {
        tiers: tiers
            .iter()
            .map(|(tier, t)| TierUsage {
                tier: *tier,
                total: totals(t),
            })
            .collect(),
        purposes: purposes
            .iter()
            .map(|line| PurposeUsage {
                tier: line.tier,
                purpose: line.purpose,
                total: totals(&line.total),
            })
            .collect(),
        total: totals(&total),
        daily,
    })
}

/// The start of today (UTC) in Unix milliseconds.
fn chrono_day_start_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    now - now.rem_euclid(86_400_000)
}

pub(crate) fn health(state: &State) -> Health {
    Health {
        status: if state.manager.is_draining() {
            "draining".to_owned()
        } else {
            "ok".to_owned()
        },
        version: env!("CARGO_PKG_VERSION").to_owned(),
        uptime_secs: state.started.elapsed().as_secs(),
        active_sessions: state.manager.active_lanes(),
        running_turns: state.manager.running().len(),
        pending_confirmations: state.approver.len(),
    }
}

async fn system_health(_params: NoParams, state: Arc<State>) -> RpcResult<Health> {
    Ok(health(&state))
}

async fn system_version(
    _params: NoParams,
    _state: Arc<State>,
    client: Client,
) -> RpcResult<VersionInfo> {
    Ok(VersionInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        protocol: PROTOCOL_VERSION,
        client: Some(ClientInfo {
            admin: client.is_admin(),
            name: client.name,
            scopes: client.scopes,
            namespace: client.namespace,
        }),
    })
}

async fn system_logs(params: LogsParams, _state: Arc<State>) -> RpcResult<LogsResult> {
    let limit = params.limit.unwrap_or(200).clamp(1, 1000);
    Ok(match crate::logs::recent(limit) {
        Some(lines) => LogsResult {
            captured: true,
            lines,
        },
        None => LogsResult {
            captured: false,
            lines: Vec::new(),
        },
    })
}

async fn channels_status(_params: NoParams, state: Arc<State>) -> RpcResult<Vec<ChannelInfo>> {
    Ok(crate::channels::status(&state))
}

async fn cluster_status(_params: NoParams, state: Arc<State>) -> RpcResult<ClusterStatus> {
    let Some(cluster) = state.manager.cluster() else {
        return Ok(ClusterStatus {
            this_node: None,
            nodes: Vec::new(),
        });
    };
    let nodes = cluster
        .nodes()
        .await
        .map_err(|error| error::internal(format!("cannot list the cluster's nodes: {error}")))?;
    Ok(ClusterStatus {
        this_node: Some(cluster.node().0.clone()),
        nodes: nodes
            .into_iter()
            .map(|node| ClusterNode {
                id: node.id.0,
                host: node.host,
                pid: node.pid,
                kind: node.kind,
                alive: node.alive,
                silent_ms: node.silent_ms,
                started_at: node.started_at,
                sessions: node.leases,
                roles: node.roles,
            })
            .collect(),
    })
}

async fn mcp_status(_params: NoParams, state: Arc<State>) -> RpcResult<Vec<McpServerStatus>> {
    Ok(crate::mcp::status(&state.mcp))
}

async fn pairing_list(_params: NoParams, state: Arc<State>) -> RpcResult<PairingList> {
    let store = state.manager.store();
    let now = crate::approver::now_millis();
    let pending = store
        .pairing_pending(now)
        .await
        .map_err(|e| error::storage(&e))?;
    let approved = store
        .approved_peers()
        .await
        .map_err(|e| error::storage(&e))?;
    Ok(PairingList {
        pending: pending.into_iter().map(pairing_code).collect(),
        approved: approved.into_iter().map(paired_sender).collect(),
    })
}

async fn pairing_approve(
    params: PairingApproveParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<PairedSender> {
    let approved = state
        .manager
        .store()
        .pairing_approve(&params.channel, &params.code, crate::approver::now_millis())
        .await
        .map_err(|e| error::storage(&e))?;
    match approved {
        Ok(mut peer) => {
            if params.owner {
                state
                    .manager
                    .store()
                    .set_peer_owner(&peer.channel, &peer.sender, true)
                    .await
                    .map_err(|e| error::storage(&e))?;
                peer.owner = true;
            }
            tracing::info!(channel = %peer.channel, sender = %peer.sender, owner = peer.owner, by = %client.principal, "pairing approved");
            Ok(paired_sender(peer))
        }
        Err(refusal) => Err(error::not_found(refusal.to_string())),
    }
}

async fn pairing_revoke(
    params: PairingRevokeParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<PairingRevokeResult> {
    tracing::info!(channel = %params.channel, sender = %params.sender, by = %client.principal, "pairing revoked");
    let revoked = state
        .manager
        .store()
        .revoke_peer(&params.channel, &params.sender)
        .await
        .map_err(|e| error::storage(&e))?;
    Ok(PairingRevokeResult { revoked })
}

/// How long a provider check is reused.
const PROVIDER_CHECK_TTL: Duration = Duration::from_secs(30);

async fn providers_status(
    params: ProvidersParams,
    state: Arc<State>,
) -> RpcResult<Vec<ProviderStatus>> {
    if !params.refresh {
        let kept = state
            .provider_checks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some((at, statuses)) = kept
            && at.elapsed() < PROVIDER_CHECK_TTL
        {
            return Ok(statuses);
        }
    }
    let checks = state
        .config
        .providers
        .iter()
        .map(|(name, provider)| async move {
            let checked_at = crate::approver::now_millis();
            match flynn_models::probe(name, provider, Duration::from_secs(5)).await {
                Ok(probe) => ProviderStatus {
                    name: name.clone(),
                    kind: provider.kind.to_string(),
                    ok: true,
                    latency_ms: Some(u64::try_from(probe.latency.as_millis()).unwrap_or(u64::MAX)),
                    models: Some(probe.models.len()),
                    error: None,
                    checked_at,
                },
                // It answered, it just has no model list to show.
                Err(
                    flynn_models::Error::Server { status, .. }
                    | flynn_models::Error::InvalidRequest { status, .. },
                ) if matches!(status, 404 | 405 | 501) => ProviderStatus {
                    name: name.clone(),
                    kind: provider.kind.to_string(),
                    ok: true,
                    latency_ms: None,
                    models: None,
                    error: None,
                    checked_at,
                },
                Err(error) => ProviderStatus {
                    name: name.clone(),
                    kind: provider.kind.to_string(),
                    ok: false,
                    latency_ms: None,
                    models: None,
                    // A server's error page, cut to its first line.
                    error: Some(
                        error
                            .to_string()
                            .lines()
                            .next()
                            .unwrap_or_default()
                            .chars()
                            .take(300)
                            .collect(),
                    ),
                    checked_at,
                },
            }
        });
    let statuses = futures::future::join_all(checks).await;
    *state
        .provider_checks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        Some((std::time::Instant::now(), statuses.clone()));
    Ok(statuses)
}

async fn system_restart(
    _params: NoParams,
    state: Arc<State>,
    client: Client,
) -> RpcResult<RestartResult> {
    tracing::info!(by = %client.principal, "restart requested over the gateway");
    // Answer first; the daemon drains and restarts right after.
    let control = state.control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        control.request_restart();
    });
    Ok(RestartResult { restarting: true })
}
