//! The tools Flynn ships with.

mod file_read;
mod shell;

pub use file_read::FileRead;
pub use shell::ShellExec;

use std::time::Duration;

use flynn_protocol::config::ToolsConfig;

use crate::ToolRegistry;

/// A registry with every built-in tool that `config` enables. Names in
/// `tools.enabled` that are not built-ins are returned as the error.
pub fn registry(config: &ToolsConfig) -> Result<ToolRegistry, Vec<String>> {
    let mut registry = ToolRegistry::new();
    registry
        .register(ShellExec::new(Duration::from_secs(
            config.shell.timeout_secs,
        )))
        .register(FileRead::new(Duration::from_secs(
            config.files.timeout_secs,
        )));
    if let Some(enabled) = &config.enabled {
        let unknown = registry.retain(enabled);
        if !unknown.is_empty() {
            return Err(unknown);
        }
    }
    Ok(registry)
}
