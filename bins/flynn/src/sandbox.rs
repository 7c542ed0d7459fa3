use flynn_core::config;

use crate::env::CliEnv;
use flynn_core::tools::sandbox::{Sandbox, SandboxPaths};

use crate::cli::SandboxArgs;
use crate::exit::Failure;

/// Prints the sandbox report for the loaded config; exits 2 when the
/// configured sandbox cannot run here (the report says why).
pub async fn run(args: SandboxArgs) -> Result<(), Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let paths = SandboxPaths::flynn(&loaded.paths.home, Some(&loaded.paths.config_file));
    let report = Sandbox::from_tools_config(&loaded.config.tools)
        .with_paths(&paths)
        .report()
        .await;
    out!("{report}");
    match &loaded.config.tools.workspace {
        Some(dir) => outln!("workspace: {} (tools.workspace)", dir.display()),
        None => outln!(
            "workspace: the current directory: embedded runs (`flynn send` without a daemon) use the directory they start in, the daemon its own, unless tools.workspace is set"
        ),
    }
    match report.active {
        Ok(_) => Ok(()),
        Err(_) => Err(Failure::usage("")),
    }
}
