//! `flynn-tui`: chat with Flynn in the terminal, through the daemon's
//! gateway. Streaming answers, tool status lines, confirmations, Esc to
//! cancel, a session picker (Ctrl+S); it reconnects when the daemon
//! restarts.

mod app;
mod ui;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use crossterm::event::{Event, EventStream, KeyEventKind};
use flynn_api::methods::{
    AgentCancel, ConfirmationsResolve, SessionsHistory, SessionsList, SessionsSend,
    SessionsSubscribe, UsageSummary,
};
use flynn_api::{
    Approval, CancelParams, HistoryParams, NoParams, Notification, ResolveParams, SendParams,
    SubscribeParams, UsageParams,
};
use flynn_client::{Backoff, Client, Error, Notifications};
use flynn_protocol::{AgentEvent, EventEnvelope, Message, SessionKey};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::app::{Action, App, Connection};

/// Flynn in the terminal: a client of the running daemon.
#[derive(Debug, Parser)]
#[command(name = "flynn-tui", version, about)]
struct Args {
    /// The daemon (default: FLYNN_GATEWAY_URL, else http://127.0.0.1:18800).
    #[arg(long, value_name = "URL")]
    gateway: Option<String>,
    /// The conversation to open (default `tui:default`).
    #[arg(long, default_value = "tui:default")]
    session: String,
    /// Config file, to find FLYNN_HOME's gateway token.
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
        }
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    if !std::io::stdout().is_terminal() {
        eprintln!("error: flynn-tui needs a terminal (for scripts, use `flynn send`)");
        return ExitCode::from(2);
    }
    let (url, token) = match target(&args) {
        Ok(target) => target,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut terminal = ratatui::init();
    let result = runtime.block_on(run(&mut terminal, url, token, args.session));
    ratatui::restore();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The daemon's `ws://…/rpc` address and the token to show it.
fn target(args: &Args) -> Result<(String, Option<String>), String> {
    let given = args
        .gateway
        .clone()
        .or_else(|| std::env::var("FLYNN_GATEWAY_URL").ok())
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:18800".to_owned());
    let url = flynn_client::rpc_url(&given)?;
    let paths = flynn_config::Paths::resolve(args.config.as_deref(), &flynn_config::ProcessEnv)
        .map_err(|e| e.to_string())?;
    let token = flynn_client::client_token(
        std::env::var("FLYNN_GATEWAY_TOKEN").ok().as_deref(),
        &paths.home,
    );
    Ok((url, token))
}

/// What the network side tells the terminal side.
enum Update {
    Connection(Connection),
    Event(Box<EventEnvelope>),
    History(Vec<Message>),
    Sessions(Vec<app::PickerEntry>),
    Usage { tokens: u64, cost_usd: f64 },
    Failed(String),
}

async fn run(
    terminal: &mut ratatui::DefaultTerminal,
    url: String,
    token: Option<String>,
    session: String,
) -> Result<(), String> {
    let mut app = App::new(session.clone());
    let (updates, mut updates_rx) = mpsc::unbounded_channel();
    let (actions, actions_rx) = mpsc::unbounded_channel();
    tokio::spawn(network(url, token, session, actions_rx, updates));
    let mut keys = EventStream::new();
    loop {
        terminal
            .draw(|frame| ui::draw(frame, &app))
            .map_err(|e| format!("cannot draw: {e}"))?;
        tokio::select! {
            key = keys.next() => {
                let Some(Ok(event)) = key else { return Ok(()) };
                if let Event::Key(key) = event
                    && key.kind != KeyEventKind::Release
                    && let Some(action) = app.key(key)
                {
                    if action == Action::Quit {
                        return Ok(());
                    }
                    if let Action::Open(key) = &action {
                        app.session.clone_from(key);
                        app.entries.clear();
                        app.tokens = 0;
                        app.cost_usd = 0.0;
                    }
                    let _ = actions.send(action);
                }
            }
            update = updates_rx.recv() => {
                let Some(update) = update else { return Ok(()) };
                match update {
                    Update::Connection(state) => app.connection = state,
                    Update::Event(envelope) => app.apply(&envelope),
                    Update::History(messages) => app.load_history(&messages),
                    Update::Sessions(sessions) => {
                        if let Some(picker) = &mut app.picker {
                            picker.sessions = sessions;
                        }
                    }
                    Update::Usage { tokens, cost_usd } => {
                        app.tokens = tokens;
                        app.cost_usd = cost_usd;
                    }
                    Update::Failed(message) => app.entries.push(app::Entry::Error(message)),
                }
            }
        }
    }
}

/// Keeps a connection to the daemon: follows the open session, carries out
/// actions, and reconnects (reloading the history) when the daemon goes
/// away.
async fn network(
    url: String,
    token: Option<String>,
    mut session: String,
    mut actions: mpsc::UnboundedReceiver<Action>,
    updates: mpsc::UnboundedSender<Update>,
) {
    let mut backoff = Backoff::default();
    loop {
        let client = backoff
            .connect(&url, token.as_deref(), |error| {
                let _ = updates.send(Update::Connection(Connection::Down));
                if let Error::Unauthorized { .. } = error {
                    let _ = updates.send(Update::Failed(error.to_string()));
                }
            })
            .await;
        let client = Arc::new(client);
        let _ = updates.send(Update::Connection(Connection::Up));
        let mut events = match open(&client, &session, &updates).await {
            Ok(events) => events,
            Err(error) => {
                let _ = updates.send(Update::Failed(error));
                continue;
            }
        };
        loop {
            tokio::select! {
                event = events.next() => {
                    match event {
                        Some(Ok(Notification::Event(envelope))) => {
                            let done = matches!(envelope.event, AgentEvent::Done { .. });
                            let _ = updates.send(Update::Event(envelope));
                            if done {
                                send_usage(&client, &session, &updates).await;
                            }
                        }
                        Some(Ok(Notification::Lagged { .. })) => {
                            let _ = open(&client, &session, &updates).await.map(|s| events = s);
                        }
                        Some(Err(_)) | None => break,
                    }
                }
                action = actions.recv() => {
                    let Some(action) = action else { return };
                    if !act(&client, &mut session, action, &mut events, &updates).await {
                        return;
                    }
                }
            }
        }
        let _ = updates.send(Update::Connection(Connection::Down));
    }
}

/// Carries out one action; false to stop.
async fn act(
    client: &Arc<Client>,
    session: &mut String,
    action: Action,
    events: &mut Notifications<Notification>,
    updates: &mpsc::UnboundedSender<Update>,
) -> bool {
    let Ok(key) = session.parse::<SessionKey>() else {
        let _ = updates.send(Update::Failed(format!("{session} is not a session key")));
        return !matches!(action, Action::Quit);
    };
    match action {
        Action::Send(text) => {
            let client = client.clone();
            let updates = updates.clone();
            tokio::spawn(async move {
                let params = SendParams {
                    session: key,
                    message: text,
                    tier: None,
                    model: None,
                    agent: None,
                    approval: Approval::Ask,
                };
                // The answer arrives as events; only a failure needs saying.
                match client.call::<SessionsSend>(&params).await {
                    Ok(_) => {}
                    Err(error) if error.rpc().is_some_and(|e| e.is_cancelled()) => {}
                    Err(error) => {
                        let _ = updates.send(Update::Failed(error.to_string()));
                    }
                }
            });
        }
        Action::Cancel => {
            let params = CancelParams {
                session: key,
                turn: None,
            };
            let _ = client.call::<AgentCancel>(&params).await;
        }
        Action::Resolve { id, approve } => {
            let params = ResolveParams {
                session: key,
                id,
                approve,
                input_digest: None,
                reason: (!approve).then(|| "denied in the terminal".to_owned()),
            };
            let _ = client.call::<ConfirmationsResolve>(&params).await;
        }
        Action::Open(next) => {
            *session = next;
            match open(client, session, updates).await {
                Ok(stream) => *events = stream,
                Err(error) => {
                    let _ = updates.send(Update::Failed(error));
                }
            }
        }
        Action::ListSessions => {
            if let Ok(list) = client.call::<SessionsList>(&NoParams {}).await {
                let entries = list
                    .into_iter()
                    .map(|s| app::PickerEntry {
                        key: s.key.as_str().to_owned(),
                        title: s.title,
                    })
                    .collect();
                let _ = updates.send(Update::Sessions(entries));
            }
        }
        Action::Quit => return false,
    }
    true
}

/// Follows `session`: subscribes, then loads its history and usage.
async fn open(
    client: &Client,
    session: &str,
    updates: &mpsc::UnboundedSender<Update>,
) -> Result<Notifications<Notification>, String> {
    let key: SessionKey = session
        .parse()
        .map_err(|_| format!("{session} is not a session key"))?;
    let events = client
        .subscribe::<SessionsSubscribe>(&SubscribeParams {
            sessions: vec![key.clone()],
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut messages: Vec<Message> = Vec::new();
    let mut after = 0;
    loop {
        let page = client
            .call::<SessionsHistory>(&HistoryParams {
                session: key.clone(),
                before: None,
                after: Some(after),
                limit: Some(1000),
            })
            .await
            .map_err(|e| e.to_string())?;
        let Some(cursor) = page.cursor.filter(|_| !page.messages.is_empty()) else {
            break;
        };
        messages.extend(page.messages.into_iter().map(|m| m.message));
        after = cursor;
    }
    let _ = updates.send(Update::History(messages));
    send_usage(client, session, updates).await;
    Ok(events)
}

async fn send_usage(client: &Client, session: &str, updates: &mpsc::UnboundedSender<Update>) {
    let Ok(key) = session.parse::<SessionKey>() else {
        return;
    };
    let params = UsageParams {
        session: Some(key),
        days: None,
    };
    if let Ok(usage) = client.call::<UsageSummary>(&params).await {
        let _ = updates.send(Update::Usage {
            tokens: usage.total.usage.input_tokens + usage.total.usage.output_tokens,
            cost_usd: usage.total.cost_usd,
        });
    }
}
