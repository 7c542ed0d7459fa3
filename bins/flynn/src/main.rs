//! `flynn`: send messages to Flynn, inspect sessions and config.

/// Like `println!`, but a closed stdout (`flynn sessions list | head -1`)
/// is not an error worth a panic: the output is simply not wanted.
macro_rules! outln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Like `print!`, without the panic on a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

mod agent;
mod approve;
mod auth;
mod backup;
mod cli;
mod config_cmd;
mod doctor;
mod env;
mod exit;
mod gateway_cmd;
mod mcp;
mod memory;
mod models;
mod onboard;
mod pairing;
mod remote;
mod sandbox;
mod send;
mod sessions;
mod skills;
mod start;
mod store;
mod token;
mod tui;
mod workspace;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, McpArgs, McpCommand};
use crate::exit::Failure;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
        }
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    if let Some(profile) = cli.profile.clone() {
        env::set_profile(profile);
    }
    let serves = matches!(&cli.command, Command::Start(_));
    if serves {
        start::init_logging();
    } else {
        init_logging();
    }
    // `flynn start` is the daemon, serving many clients and turns at once:
    // a worker thread per core, as `flynn-daemon` has. Every other command
    // is one request: one thread starts faster and does the job.
    let runtime = if serves {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
    .enable_all()
    .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let serves_stdio = matches!(
        &cli.command,
        Command::Mcp(McpArgs {
            command: McpCommand::Serve { .. },
            ..
        })
    );
    let command = match cli.into_command() {
        Ok(command) => command,
        Err(message) => return Failure::usage(message).report(),
    };
    let result = runtime.block_on(run(command));
    if serves_stdio {
        // A read of a terminal's stdin cannot be cancelled (pipes, as MCP
        // clients give, can): do not wait for it after Ctrl-C.
        runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Send(args) => send::run(args).await,
        Command::Start(args) => start::run(args).await,
        Command::Sessions(args) => sessions::run(args).await,
        Command::Pairing(args) => pairing::run(args).await,
        Command::Skills(args) => skills::run(args),
        Command::Config(args) => config_cmd::run(args),
        Command::Token(args) => token::run(args),
        Command::Auth(args) => auth::run(args).await,
        Command::Agent(args) => agent::run(args),
        Command::Tui(args) => tui::run(args).await,
        Command::Gateway(args) => gateway_cmd::run(args).await,
        Command::Usage(args) => sessions::usage(args).await,
        Command::Sandbox(args) => sandbox::run(args).await,
        Command::Memory(args) => memory::run(args).await,
        Command::Models(args) => models::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Doctor(args) => doctor::run(args).await,
        Command::Backup(args) => backup::backup(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Store(args) => store::run(args).await,
        Command::Onboard(args) => onboard::run(args).await,
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "flynn", &mut script);
            out!("{}", String::from_utf8_lossy(&script));
            Ok(())
        }
    }
}

/// Logs go to stderr, filtered by `FLYNN_LOG` (e.g. `FLYNN_LOG=debug`);
/// only errors are shown by default, as warnings reach the user as events.
fn init_logging() {
    let filter = std::env::var("FLYNN_LOG").unwrap_or_else(|_| "error".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    // No colour codes where stderr is a file or a pipe (`flynn mcp serve`
    // writes its log to the MCP client's).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}
