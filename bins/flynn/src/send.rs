use std::io::{IsTerminal, Read, Write};

use flynn_core::config;
use flynn_core::tools::builtin::ProcessLifetime;

use crate::env::CliEnv;
use flynn_core::gateway::api::SendParams;
use flynn_core::{AgentEvent, CancellationToken, Flynn, SessionKey, TurnOutcome, TurnRequest};
use serde_json::json;

use crate::cli::SendArgs;
use crate::exit::Failure;

pub async fn run(args: SendArgs) -> Result<(), Failure> {
    let message = read_message(&args.message)?;
    let session: SessionKey = crate::sessions::session_arg(&args.session)
        .map_err(|e| Failure::usage(format!("--session: {e}")))?;
    if let Some(target) = crate::remote::target(args.gateway.as_deref(), args.config.as_deref())? {
        let params = SendParams {
            session,
            message,
            tier: args.tier,
            model: args.model,
            agent: args.agent,
            approval: Default::default(),
        };
        let mut printer = Printer::new(args.json);
        return crate::remote::send(&target, params, args.yes, &mut printer, args.json).await;
    }
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    crate::models::announce_fallback(&loaded);
    let workspace = crate::workspace::resolve(&loaded);
    // Said to a person at a terminal; scripts keep a clean stderr (and
    // `flynn sandbox` says it too).
    if let Some(note) = &workspace.note
        && std::io::stderr().is_terminal()
    {
        eprintln!("note: {note}");
    }
    let flynn = Flynn::builder()
        .config(loaded.config)
        .home(loaded.paths.home)
        .private_path(loaded.paths.config_file)
        .workspace(workspace.path)
        // This process ends after one turn: background processes end with
        // it, and the model is told so.
        .process_lifetime(ProcessLifetime::Command)
        .build()
        .await?;

    let cancel = CancellationToken::new();
    let mut request = TurnRequest::text(session.clone(), message);
    request.tier = args.tier;
    request.model = args.model;
    request.agent = args.agent;
    request.approver = Some(crate::approve::for_run(args.yes));
    let mut printer = Printer::new(args.json);
    let result = {
        let mut on_event = |event| printer.event(event);
        let turn = flynn.send(request, cancel.clone(), &mut on_event);
        tokio::pin!(turn);
        // Ctrl-C cancels the turn, which then ends promptly with every tool
        // call paired with a result in the history.
        tokio::select! {
            result = &mut turn => result,
            _ = tokio::signal::ctrl_c() => {
                cancel.cancel();
                turn.await
            }
        }
    };
    let running = flynn.running_processes();
    if !running.is_empty() {
        printer.end_line();
        let named: Vec<String> = running
            .iter()
            .map(|p| format!("{} (`{}`)", p.id, p.command))
            .collect();
        let (what, verb) = if running.len() == 1 {
            ("background process", "is")
        } else {
            ("background processes", "are")
        };
        eprintln!(
            "note: {what} {} {verb} stopped now: processes started by `flynn send` end with it (to keep them running, start the daemon with `flynn start` and send through it)",
            named.join(", ")
        );
    }
    // A node of a cluster (sessions in PostgreSQL) leaves it, after its
    // turn's last events went to the other nodes: the sessions it held
    // are free for them at once.
    if flynn.manager().cluster().is_some() {
        flynn.manager().shutdown().await;
    } else {
        // What the turn's tools keep running (a browser) ends with this
        // command too: a process left behind would outlive it, orphaned.
        flynn.manager().executor().registry().shutdown().await;
    }
    // The store is left open for the process's exit: closing it would
    // checkpoint the write-ahead log (three more syncs), which costs this
    // command more time than replaying the log costs the next one.
    match result {
        Ok(outcome) => {
            printer.finish(&session, &outcome);
            Ok(())
        }
        Err(error) => {
            if args.json {
                let out = json!({
                    "session": session.as_str(),
                    "error": {"code": error.code(), "message": error.to_string()},
                });
                outln!("{out}");
            }
            printer.end_line();
            Err(error.into())
        }
    }
}

fn read_message(arg: &str) -> Result<String, Failure> {
    let message = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::usage(format!("cannot read the message from stdin: {e}")))?;
        text
    } else {
        arg.to_owned()
    };
    if message.trim().is_empty() {
        return Err(Failure::usage(
            "the message is empty (expected text, or `-` to read it from stdin)",
        ));
    }
    Ok(message)
}

/// Writes the answer to stdout as it streams, and progress to stderr.
pub(crate) struct Printer {
    json: bool,
    /// stderr is a terminal: a person is watching.
    tty: bool,
    color: bool,
    /// Whether stdout's last byte was not a newline.
    open_line: bool,
    /// The chat command answered, when the message was one.
    command: Option<String>,
}

impl Printer {
    pub(crate) fn new(json: bool) -> Self {
        Printer {
            json,
            tty: std::io::stderr().is_terminal(),
            color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            open_line: false,
            command: None,
        }
    }

    /// No colours, whatever the terminal (`flynn tui --minimal`: dumb
    /// terminals, screen readers).
    pub(crate) fn plain(mut self) -> Self {
        self.color = false;
        self
    }

    pub(crate) fn event(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::ContentDelta { text } if !self.json => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
                if !text.is_empty() {
                    self.open_line = !text.ends_with('\n');
                }
            }
            AgentEvent::ToolStart { name, input, .. } => {
                self.end_line();
                let mut args = input.to_string();
                if args.len() > 120 {
                    let end = args.floor_char_boundary(117);
                    args.truncate(end);
                    args.push_str("...");
                }
                self.progress(&format!("→ {name} {args}"));
            }
            AgentEvent::ToolEnd {
                name, ok, output, ..
            } => {
                if ok {
                    self.progress(&format!("✓ {name}"));
                } else {
                    let first = output.lines().next().unwrap_or_default();
                    self.progress(&format!("✗ {name}: {first}"));
                }
            }
            AgentEvent::Warning { message } | AgentEvent::Interrupted { message, .. } => {
                self.end_line();
                self.progress(&format!("warning: {message}"));
            }
            AgentEvent::Compaction {
                replaced,
                tokens_before,
                tokens_after,
                fallback,
            } => {
                self.end_line();
                let how = if fallback {
                    "an extractive summary (the summariser was not available)"
                } else {
                    "a summary"
                };
                self.progress(&format!(
                    "compacted {replaced} older messages into {how}: about {tokens_before} → {tokens_after} tokens"
                ));
            }
            AgentEvent::Command { name, .. } => self.command = Some(name),
            AgentEvent::Media { file } => {
                self.end_line();
                self.progress(&format!(
                    "sent {} {} ({}, {} bytes; the gateway serves it at /media/{})",
                    file.kind.as_str(),
                    file.name,
                    file.media_type,
                    file.size,
                    file.id
                ));
            }
            AgentEvent::Queued { ahead } => {
                self.progress(&format!("queued behind {ahead} turn(s) of this session"));
            }
            _ => {}
        }
    }

    fn progress(&self, line: &str) {
        if self.color {
            eprintln!("\x1b[2m{line}\x1b[0m");
        } else {
            eprintln!("{line}");
        }
    }

    pub(crate) fn end_line(&mut self) {
        if self.open_line {
            outln!();
            self.open_line = false;
        }
    }

    pub(crate) fn finish(&mut self, session: &SessionKey, outcome: &TurnOutcome) {
        if let Some(command) = &self.command {
            if self.json {
                let out = json!({
                    "reply": outcome.reply,
                    "session": session.as_str(),
                    "command": command,
                });
                outln!("{out}");
            } else {
                outln!("{}", outcome.reply);
            }
            return;
        }
        if self.json {
            let mut out = json!({
                "reply": outcome.reply,
                "session": session.as_str(),
                "provider": outcome.provider,
                "model": outcome.model,
                "usage": {
                    "input_tokens": outcome.usage.input_tokens,
                    "output_tokens": outcome.usage.output_tokens,
                },
                "tool_calls": outcome.tool_calls,
            });
            if let Some(cost) = outcome.cost_usd {
                out["cost_usd"] = json!(cost);
            }
            if let Some(warning) = &outcome.warning {
                out["warning"] = json!(warning);
            }
            outln!("{out}");
        } else {
            self.end_line();
            // On a terminal, say which model answered and what it cost.
            if self.tty {
                let cost = outcome
                    .cost_usd
                    .map(|c| format!(" · ${c:.4}"))
                    .unwrap_or_default();
                self.progress(&format!(
                    "{}/{} · {} in / {} out{cost}",
                    outcome.provider,
                    outcome.model,
                    outcome.usage.input_tokens,
                    outcome.usage.output_tokens
                ));
            }
        }
    }
}
