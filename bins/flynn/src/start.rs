//! `flynn start`: the daemon in the foreground, as `flynn-daemon` runs it.

use flynn_core::config;

use crate::env::CliEnv;
use flynn_core::daemon::{Daemon, DaemonOptions, StopSignals};

use crate::cli::StartArgs;
use crate::exit::Failure;

pub async fn run(args: StartArgs) -> Result<(), Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let mut stop = StopSignals::listen();
    let daemon = Daemon::start(DaemonOptions::from_loaded(loaded, args.bind)).await?;
    eprintln!(
        "flynn {} listening on http://{} (token: {}); Ctrl-C stops",
        env!("CARGO_PKG_VERSION"),
        daemon.addr(),
        daemon.token_source()
    );
    tokio::select! {
        signal = stop.next() => {
            eprintln!("{signal}: shutting down");
        }
        () = daemon.restart_requested() => {
            eprintln!("restart requested: stopping (run `flynn start` again, or use flynn-daemon under systemd)");
        }
    }
    daemon.shutdown().await;
    Ok(())
}

/// The daemon logs at `info` by default (`FLYNN_LOG` overrides); the last
/// lines are also kept for the dashboard (`system.logs`).
pub fn init_logging() {
    use tracing_subscriber::prelude::*;
    let filter = std::env::var("FLYNN_LOG").unwrap_or_else(|_| "info".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(flynn_core::gateway::log_layer())
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr),
        )
        .try_init();
}
