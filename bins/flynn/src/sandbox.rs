use flynn_core::config::{self, Workspace, WorkspaceOrigin};

use crate::env::CliEnv;
use flynn_core::tools::sandbox::{Sandbox, SandboxPaths};

use crate::cli::SandboxArgs;
use crate::exit::Failure;

/// Prints the sandbox report for the loaded config; exits 2 when the
/// configured sandbox cannot run here (the report says why).
pub async fn run(args: SandboxArgs) -> Result<(), Failure> {
    let mut loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let workspace = crate::workspace::resolve(&loaded);
    let paths = SandboxPaths::flynn(&loaded.paths.home, Some(&loaded.paths.config_file));
    let configured = loaded.config.tools.workspace.is_some();
    loaded.config.tools.workspace = Some(workspace.path.clone());
    let report = Sandbox::from_tools_config(&loaded.config.tools)
        .with_paths(&paths)
        .report()
        .await;
    out!("{report}");
    let shown = workspace.path.display();
    match workspace.origin {
        WorkspaceOrigin::Configured => outln!("workspace: {shown} (tools.workspace)"),
        WorkspaceOrigin::CurrentDir => outln!(
            "workspace: {shown}, the current directory, for `flynn send` without a daemon; the daemon works in {}",
            Workspace::default_for(&loaded.paths.home).display()
        ),
        WorkspaceOrigin::Default => {
            outln!("workspace: {shown} (FLYNN_HOME/workspace, the default)");
            if let Some(note) = &workspace.note {
                outln!("  for `flynn send` without a daemon: {note}");
            }
        }
    }
    if !configured {
        outln!("  set tools.workspace to choose another directory");
    }
    match report.active {
        Ok(_) => Ok(()),
        Err(_) => Err(Failure::usage("")),
    }
}
