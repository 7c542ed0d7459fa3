//! `flynn tui`: the full-screen terminal client (`flynn-tui`, started for
//! you), or with `--minimal` a plain line-by-line conversation for dumb
//! terminals, screen readers and pipes: a line in, the answer out, in one
//! session, until end of input or `/quit`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use flynn_core::gateway::api::SendParams;
use flynn_core::tools::builtin::ProcessLifetime;
use flynn_core::{CancellationToken, Flynn, SessionKey, TurnRequest, config};

use crate::cli::TuiArgs;
use crate::env::CliEnv;
use crate::exit::Failure;
use crate::send::Printer;

pub async fn run(args: TuiArgs) -> Result<(), Failure> {
    if args.minimal {
        minimal(args).await
    } else {
        full_screen(&args)
    }
}

/// Starts `flynn-tui` (beside this program, else on `PATH`) with the same
/// session, daemon and config, and waits for it.
fn full_screen(args: &TuiArgs) -> Result<(), Failure> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("flynn-tui")))
        .filter(|path| path.is_file());
    let program = beside
        .or_else(|| flynn_core::tools::find_program(std::path::Path::new("flynn-tui")))
        .ok_or_else(|| {
            Failure::usage(
                "flynn-tui is not installed beside flynn or on PATH (cargo install --path bins/flynn-tui); `flynn tui --minimal` works without it",
            )
        })?;
    let mut command = std::process::Command::new(program);
    command.arg("--session").arg(&args.session);
    if let Some(gateway) = &args.gateway {
        command.arg("--gateway").arg(gateway);
    }
    if let Some(config) = &args.config {
        command.arg("--config").arg(config);
    }
    let status = command
        .status()
        .map_err(|e| Failure::other(format!("cannot start flynn-tui: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Failure {
            code: u8::try_from(code).unwrap_or(1),
            message: String::new(),
        }),
        None => Err(Failure::other("flynn-tui was stopped by a signal")),
    }
}

/// The next line of input (`None` at its end).
async fn next_line(prompt: bool) -> Option<String> {
    if prompt {
        eprint!("› ");
        let _ = std::io::stderr().flush();
    }
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    })
    .await
    .ok()
    .flatten()
}

async fn minimal(args: TuiArgs) -> Result<(), Failure> {
    let session: SessionKey = crate::sessions::session_arg(&args.session)
        .map_err(|e| Failure::usage(format!("--session: {e}")))?;
    let prompt = std::io::stdin().is_terminal();
    if prompt {
        eprintln!(
            "Flynn, session {session}. Type a message and press Enter; /help for commands, /quit (or Ctrl-D) to leave."
        );
    }
    let remote = crate::remote::target(args.gateway.as_deref(), args.config.as_deref())?;
    // Embedded: one runtime for the whole conversation, so background
    // processes and the browser last as long as it does.
    let embedded = match &remote {
        Some(_) => None,
        None => Some(runtime(args.config.clone()).await?),
    };
    while let Some(line) = next_line(prompt).await {
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        if matches!(message, "/quit" | "/exit") {
            break;
        }
        let mut printer = Printer::new(false).plain();
        let result = match (&remote, &embedded) {
            (Some(target), _) => {
                let params = SendParams {
                    session: session.clone(),
                    message: message.to_owned(),
                    tier: None,
                    model: None,
                    agent: None,
                    approval: Default::default(),
                };
                crate::remote::send(target, params, args.yes, &mut printer, false).await
            }
            (None, Some(flynn)) => {
                let mut request = TurnRequest::text(session.clone(), message);
                request.approver = Some(crate::approve::for_run(args.yes));
                let cancel = CancellationToken::new();
                let outcome = {
                    let mut on_event = |event| printer.event(event);
                    let turn = flynn.send(request, cancel.clone(), &mut on_event);
                    tokio::pin!(turn);
                    tokio::select! {
                        result = &mut turn => result,
                        _ = tokio::signal::ctrl_c() => {
                            cancel.cancel();
                            turn.await
                        }
                    }
                };
                match outcome {
                    Ok(outcome) => {
                        printer.finish(&session, &outcome);
                        Ok(())
                    }
                    Err(error) => {
                        printer.end_line();
                        Err(error.into())
                    }
                }
            }
            (None, None) => Ok(()),
        };
        // A failed turn is said, and the conversation goes on.
        if let Err(failure) = result {
            eprintln!("error: {}", failure.message);
        }
    }
    if let Some(flynn) = embedded {
        flynn.manager().shutdown().await;
    }
    Ok(())
}

async fn runtime(config: Option<PathBuf>) -> Result<Flynn, Failure> {
    let loaded = config::load(config.as_deref(), &CliEnv)?;
    crate::models::announce_fallback(&loaded);
    let workspace = crate::workspace::resolve(&loaded);
    Ok(Flynn::builder()
        .config(loaded.config)
        .home(loaded.paths.home)
        .private_path(loaded.paths.config_file)
        .workspace(workspace.path)
        .process_lifetime(ProcessLifetime::Command)
        .build()
        .await?)
}
