//! The tools Flynn ships with.

mod file_read;
mod shell;

pub use file_read::FileRead;
pub use shell::ShellExec;

use std::time::Duration;

use flynn_protocol::config::ToolsConfig;

use crate::ToolRegistry;

/// Names in `tools.enabled` that are not built-in tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tools.enabled: unknown tool(s) {}, expected built-in tools: {}",
    .unknown.join(", "),
    .available.join(", ")
)]
pub struct UnknownTools {
    pub unknown: Vec<String>,
    pub available: Vec<String>,
}

/// A registry with every built-in tool that `config` enables.
pub fn registry(config: &ToolsConfig) -> Result<ToolRegistry, UnknownTools> {
    let mut registry = ToolRegistry::new();
    registry
        .register(ShellExec::new(Duration::from_secs(
            config.shell.timeout_secs,
        )))
        .register(FileRead::new(Duration::from_secs(
            config.files.timeout_secs,
        )));
    if let Some(enabled) = &config.enabled {
        let available = registry.names().map(str::to_owned).collect();
        let unknown = registry.retain(enabled);
        if !unknown.is_empty() {
            return Err(UnknownTools { unknown, available });
        }
    }
    Ok(registry)
}
