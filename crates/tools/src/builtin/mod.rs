//! The tools Flynn ships with.

mod agents;
#[cfg(feature = "browser")]
pub mod browser;
mod files;
mod media;
pub mod process;
mod shell;
mod tool_search;
pub mod web;

pub use agents::{
    AgentHost, AgentsSpawn, SessionsHistory, SessionsList, SessionsSend, SpawnRequest, TOOL_OUTPUT,
    ToolOutputRead, page,
};
pub use files::{FileEdit, FileList, FileRead, FileSearch, FileWrite};
pub use media::{MAX_SEND_BYTES, MediaSend, MediaSender, OutgoingMedia, kind_of, media_type_of};
pub use process::{
    ProcessKill, ProcessLifetime, ProcessList, ProcessManager, ProcessOutput, ProcessStart,
    ProcessStatusTool,
};
pub use shell::ShellExec;
pub use tool_search::ToolSearch;
pub use web::{WebFetch, WebSearch};

use std::sync::Arc;
use std::time::Duration;

use flynn_protocol::config::ToolsConfig;

use crate::ToolRegistry;
use crate::sandbox::{Sandbox, SandboxPaths};

/// A registry with every built-in tool, configured by `config`. Which of
/// them an agent may use is its [`ToolPolicy`](crate::ToolPolicy)'s job.
/// `shell.exec` and the `process.*` tools share one [`Sandbox`]
/// (`tools.sandbox`) and the `process.*` tools one [`ProcessManager`]
/// (`tools.process`), whose processes [`ToolRegistry::shutdown`] kills.
/// Nothing of Flynn's own is hidden from commands beyond
/// [`SYSTEM_CONFIG`](crate::sandbox::SYSTEM_CONFIG); a runtime with a
/// `FLYNN_HOME` uses [`registry_with`].
pub fn registry(config: &ToolsConfig) -> ToolRegistry {
    registry_with(config, &SandboxPaths::default())
}

/// [`registry`], with `paths` (`FLYNN_HOME`, the config) kept from the
/// commands of `shell.exec` and `process.*`.
pub fn registry_with(config: &ToolsConfig, paths: &SandboxPaths) -> ToolRegistry {
    registry_and_processes(config, paths, ProcessLifetime::Runtime).0
}

/// [`registry_with`], with background processes that live as `lifetime`
/// says, and the [`ProcessManager`] of its `process.*` tools (to ask which
/// processes still run).
pub fn registry_and_processes(
    config: &ToolsConfig,
    paths: &SandboxPaths,
    lifetime: ProcessLifetime,
) -> (ToolRegistry, Arc<ProcessManager>) {
    let sandbox = Arc::new(Sandbox::from_tools_config(config).with_paths(paths));
    let processes =
        Arc::new(ProcessManager::new(&config.process, sandbox.clone()).with_lifetime(lifetime));
    let manager = processes.clone();
    let files = Duration::from_secs(config.files.timeout_secs);
    let mut registry = ToolRegistry::new();
    registry
        .register(ShellExec::new(
            Duration::from_secs(config.shell.timeout_secs),
            sandbox,
        ))
        .register(FileRead::new(files))
        .register(FileWrite::new(files))
        .register(FileEdit::new(files))
        .register(FileList::new(files))
        .register(FileSearch::new(files))
        .register(MediaSend::new(files))
        .register(ToolSearch)
        .register(ProcessStart::new(processes.clone()))
        .register(ProcessStatusTool::new(processes.clone()))
        .register(ProcessOutput::new(processes.clone()))
        .register(ProcessKill::new(processes.clone()))
        .register(ProcessList::new(processes))
        .register(WebFetch::new(&config.web_fetch))
        .register(WebSearch::new(&config.web_search))
        .register(AgentsSpawn)
        .register(SessionsList)
        .register(SessionsHistory)
        .register(SessionsSend)
        .register(ToolOutputRead);
    (registry, manager)
}

/// Adds the `browser.*` tools (`tools.browser`), their profiles under
/// `home/browser`; returns the [`Browsers`](browser::Browsers) they share,
/// which [`ToolRegistry::shutdown`] closes.
#[cfg(feature = "browser")]
pub fn register_browser(
    registry: &mut ToolRegistry,
    config: &ToolsConfig,
    home: &std::path::Path,
) -> browser::Browsers {
    let browsers = browser::Browsers::new(&config.browser, home.join("browser"));
    for tool in browser::tools(&browsers) {
        registry.register_dyn(tool);
    }
    browsers
}
