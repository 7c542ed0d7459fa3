//! The workspace of the CLI's embedded runs: `tools.workspace`, else the
//! current directory unless it is `/`, the home directory or holds
//! `FLYNN_HOME`, else `FLYNN_HOME/workspace` (the daemon's default).

use flynn_core::config::{Loaded, Workspace, WorkspaceOrigin};

use crate::env::CliEnv;

/// Where tools work for a run of this CLI. Never fails: a workspace that
/// cannot be created is reported when a tool first needs it.
pub(crate) fn resolve(loaded: &Loaded) -> Workspace {
    let current = std::env::current_dir().ok();
    Workspace::resolve(
        loaded.config.tools.workspace.as_deref(),
        &loaded.paths.home,
        current.as_deref(),
        &CliEnv,
    )
    .unwrap_or_else(|error| Workspace {
        path: Workspace::default_for(&loaded.paths.home),
        origin: WorkspaceOrigin::Default,
        note: Some(error.to_string()),
    })
}
