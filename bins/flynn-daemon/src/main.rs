//! `flynn-daemon`: serves Flynn's gateway until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flynn_core::config::{self, ProcessEnv};
use flynn_core::daemon::{Daemon, DaemonOptions, StopSignals};

/// Flynn's daemon: runs sessions and serves the gateway (JSON-RPC at
/// /rpc, /healthz, /metrics, /v1/chat/completions, /webhooks/<name>).
#[derive(Debug, Parser)]
#[command(name = "flynn-daemon", version, about)]
struct Args {
    /// Config file (default: FLYNN_CONFIG or ~/.config/flynn/config.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on, over gateway.bind.
    #[arg(long)]
    bind: Option<String>,
    /// Merge `profiles/<NAME>.overlay.yaml` (next to the config file) over
    /// the config; default FLYNN_PROFILE.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Log lines as text or as JSON objects (one per line).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
        }
    };
    init_logging(args.log_format);
    // One crypto provider for every TLS user (model providers, the chat
    // platforms), whatever else the dependency tree enables.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(Stopped::Exit) => ExitCode::SUCCESS,
        Ok(Stopped::Restart) => {
            drop(runtime);
            restart()
        }
        Err((code, message)) => {
            tracing::error!("{message}");
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

enum Stopped {
    Exit,
    Restart,
}

async fn run(args: &Args) -> Result<Stopped, (u8, String)> {
    let env = DaemonEnv {
        profile: args.profile.clone(),
    };
    let loaded = config::load(args.config.as_deref(), &env).map_err(|e| (2, e.to_string()))?;
    if let Some(path) = &loaded.local_fallback {
        eprintln!(
            "note: no model provider is configured; answering with the local model {}",
            path.display()
        );
    }
    let mut stop = StopSignals::listen();
    let daemon = Daemon::start(DaemonOptions::from_loaded(loaded, args.bind.clone()))
        .await
        .map_err(|e| {
            let code = match e.code() {
                flynn_core::ErrorCode::Config => 2,
                _ => 1,
            };
            (code, e.to_string())
        })?;
    eprintln!(
        "flynn-daemon {} listening on http://{} (token: {})",
        env!("CARGO_PKG_VERSION"),
        daemon.addr(),
        daemon.token_source()
    );
    let restart = tokio::select! {
        signal = stop.next() => {
            tracing::info!(signal, "shutting down");
            false
        }
        () = daemon.restart_requested() => true,
    };
    let restart = restart || daemon.restart_was_requested();
    // A second signal while draining stops at once.
    let shutdown = daemon.shutdown();
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => {}
        signal = stop.next() => {
            tracing::warn!(signal, "stopping without waiting for running turns");
            return Ok(Stopped::Exit);
        }
    }
    Ok(if restart {
        Stopped::Restart
    } else {
        Stopped::Exit
    })
}

/// The process environment, with `--profile` over `FLYNN_PROFILE`.
struct DaemonEnv {
    profile: Option<String>,
}

impl config::Env for DaemonEnv {
    fn var(&self, name: &str) -> Option<String> {
        match &self.profile {
            Some(profile) if name == config::PROFILE_VAR => Some(profile.clone()),
            _ => config::Env::var(&ProcessEnv, name),
        }
    }
}

/// Starts this program again in place, with the same arguments.
fn restart() -> ExitCode {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("error: cannot find this program to restart it");
        return ExitCode::FAILURE;
    };
    tracing::info!("restarting");
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .exec();
        eprintln!("error: cannot restart: {error}");
        ExitCode::FAILURE
    }
    #[cfg(not(unix))]
    {
        match std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .spawn()
        {
            Ok(_) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: cannot restart: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Logs go to stderr (journald keeps them under systemd), filtered by
/// `FLYNN_LOG` (default `info`); the last lines are also kept for the
/// dashboard (`system.logs`).
fn init_logging(format: LogFormat) {
    use tracing_subscriber::prelude::*;
    let filter = std::env::var("FLYNN_LOG").unwrap_or_else(|_| "info".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(flynn_core::gateway::log_layer());
    let printer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => registry.with(printer).try_init(),
        LogFormat::Json => registry.with(printer.json()).try_init(),
    };
}
