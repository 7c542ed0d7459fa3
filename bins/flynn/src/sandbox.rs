use flynn_core::config;

use crate::env::CliEnv;
use flynn_core::tools::sandbox::Sandbox;

use crate::cli::SandboxArgs;
use crate::exit::Failure;

/// Prints the sandbox report for the loaded config; exits 2 when the
/// configured sandbox cannot run here (the report says why).
pub async fn run(args: SandboxArgs) -> Result<(), Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let report = Sandbox::from_tools_config(&loaded.config.tools)
        .report()
        .await;
    out!("{report}");
    match report.active {
        Ok(_) => Ok(()),
        Err(_) => Err(Failure::usage("")),
    }
}
