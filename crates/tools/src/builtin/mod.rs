//! The tools Flynn ships with.

mod file_read;
mod shell;
pub mod web;

pub use file_read::FileRead;
pub use shell::ShellExec;
pub use web::{WebFetch, WebSearch};

use std::time::Duration;

use flynn_protocol::config::ToolsConfig;

use crate::ToolRegistry;

/// A registry with every built-in tool, configured by `config`. Which of
/// them an agent may use is its [`ToolPolicy`](crate::ToolPolicy)'s job.
pub fn registry(config: &ToolsConfig) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    registry
        .register(ShellExec::new(Duration::from_secs(
            config.shell.timeout_secs,
        )))
        .register(FileRead::new(Duration::from_secs(
            config.files.timeout_secs,
        )))
        .register(WebFetch::new(&config.web_fetch))
        .register(WebSearch::new(&config.web_search));
    registry
}
