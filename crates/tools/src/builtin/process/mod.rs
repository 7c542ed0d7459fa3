//! `process.*`: commands that keep running in the background between
//! calls (a dev server, a long build), started, watched and killed through
//! one shared [`ProcessManager`].

mod manager;
mod ring;

pub use manager::{
    KillReason, ProcessInfo, ProcessLifetime, ProcessManager, ProcessStatus, RecentOutput,
};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{ToolContext, ToolError, TypedTool};

/// Longest `wait_secs` of `process.status`.
const MAX_WAIT_SECS: u64 = 120;
/// Bytes `process.output` returns when the call names none.
const DEFAULT_OUTPUT_BYTES: usize = 16 * 1024;
/// Time limit of the calls that only look or kill.
const QUICK_TIMEOUT: Duration = Duration::from_secs(15);
/// Time limit of `process.start` (a sandbox may take a moment to set up).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// `process.start`.
#[derive(Debug, Clone)]
pub struct ProcessStart {
    manager: Arc<ProcessManager>,
}

/// `process.status`.
#[derive(Debug, Clone)]
pub struct ProcessStatusTool {
    manager: Arc<ProcessManager>,
}

/// `process.output`.
#[derive(Debug, Clone)]
pub struct ProcessOutput {
    manager: Arc<ProcessManager>,
}

/// `process.kill`.
#[derive(Debug, Clone)]
pub struct ProcessKill {
    manager: Arc<ProcessManager>,
}

/// `process.list`.
#[derive(Debug, Clone)]
pub struct ProcessList {
    manager: Arc<ProcessManager>,
}

impl ProcessStart {
    pub fn new(manager: Arc<ProcessManager>) -> Self {
        ProcessStart { manager }
    }
}

impl ProcessStatusTool {
    pub fn new(manager: Arc<ProcessManager>) -> Self {
        ProcessStatusTool { manager }
    }
}

impl ProcessOutput {
    pub fn new(manager: Arc<ProcessManager>) -> Self {
        ProcessOutput { manager }
    }
}

impl ProcessKill {
    pub fn new(manager: Arc<ProcessManager>) -> Self {
        ProcessKill { manager }
    }
}

impl ProcessList {
    pub fn new(manager: Arc<ProcessManager>) -> Self {
        ProcessList { manager }
    }
}

/// Arguments of `process.start`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartArgs {
    /// The command line, run with `sh -c`.
    command: String,
    /// Working directory, relative to the workspace.
    cwd: Option<String>,
}

/// Arguments of `process.status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// Id from process.start, e.g. `p1`.
    id: String,
    /// Wait up to this many seconds for it to exit (at most 120).
    wait_secs: Option<u64>,
}

/// Arguments of `process.output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputArgs {
    /// Id from process.start, e.g. `p1`.
    id: String,
    /// Only the last this many bytes (default 16384).
    bytes: Option<usize>,
}

/// Arguments of `process.kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdArgs {
    /// Id from process.start, e.g. `p1`.
    id: String,
}

/// Arguments of `process.list` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[async_trait]
impl TypedTool for ProcessStart {
    type Args = StartArgs;

    fn name(&self) -> &str {
        "process.start"
    }

    fn description(&self) -> &str {
        match self.manager.lifetime() {
            ProcessLifetime::Runtime => {
                "Start a shell command in the background (e.g. a server); returns its id."
            }
            ProcessLifetime::Command => {
                "Start a shell command in the background; returns its id. This run is one command: the process is killed when it ends, right after your answer."
            }
        }
    }

    fn timeout(&self) -> Duration {
        START_TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::RunsProcesses
    }

    async fn run(&self, args: StartArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let cwd = match &args.cwd {
            Some(dir) => ctx.confine(dir)?,
            None => ctx.workspace.clone(),
        };
        let info = self
            .manager
            .start(&ctx.session, &args.command, &cwd, &ctx.workspace)
            .await?;
        Ok(match self.manager.lifetime() {
            ProcessLifetime::Runtime => format!("started {} (pid {})", info.id, info.pid),
            ProcessLifetime::Command => format!(
                "started {} (pid {}); it runs only while this command runs and is killed when it ends, right after your answer: finish what needs it in this turn, and do not tell the user it keeps running",
                info.id, info.pid
            ),
        })
    }

    async fn shutdown(&self) {
        self.manager.shutdown().await;
    }
}

#[async_trait]
impl TypedTool for ProcessStatusTool {
    type Args = StatusArgs;

    fn name(&self) -> &str {
        "process.status"
    }

    fn description(&self) -> &str {
        "Whether a background process is running or how it ended."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(MAX_WAIT_SECS) + QUICK_TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: StatusArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let wait = Duration::from_secs(args.wait_secs.unwrap_or(0).min(MAX_WAIT_SECS));
        let info = self.manager.status(&ctx.session, &args.id, wait).await?;
        Ok(info.to_string())
    }

    async fn shutdown(&self) {
        self.manager.shutdown().await;
    }
}

#[async_trait]
impl TypedTool for ProcessOutput {
    type Args = OutputArgs;

    fn name(&self) -> &str {
        "process.output"
    }

    fn description(&self) -> &str {
        "Recent output (stdout and stderr) of a background process."
    }

    fn timeout(&self) -> Duration {
        QUICK_TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: OutputArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let bytes = args.bytes.unwrap_or(DEFAULT_OUTPUT_BYTES);
        let output = self.manager.output(&ctx.session, &args.id, bytes)?;
        let mut text = String::new();
        if output.earlier > 0 {
            text.push_str(&format!("[{} earlier bytes not shown", output.earlier));
            if output.in_buffer > 0 {
                text.push_str(&format!(
                    "; a larger `bytes` shows up to {} more",
                    output.in_buffer
                ));
            }
            text.push_str("]\n");
        }
        if output.text.is_empty() && output.earlier == 0 {
            text.push_str("[no output]");
        }
        text.push_str(&output.text);
        Ok(text)
    }

    async fn shutdown(&self) {
        self.manager.shutdown().await;
    }
}

#[async_trait]
impl TypedTool for ProcessKill {
    type Args = IdArgs;

    fn name(&self) -> &str {
        "process.kill"
    }

    fn description(&self) -> &str {
        "Kill a background process and everything it started."
    }

    fn timeout(&self) -> Duration {
        QUICK_TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::RunsProcesses
    }

    async fn run(&self, args: IdArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let info = self.manager.kill(&ctx.session, &args.id).await?;
        Ok(info.to_string())
    }

    async fn shutdown(&self) {
        self.manager.shutdown().await;
    }
}

#[async_trait]
impl TypedTool for ProcessList {
    type Args = NoArgs;

    fn name(&self) -> &str {
        "process.list"
    }

    fn description(&self) -> &str {
        "List this conversation's background processes."
    }

    fn timeout(&self) -> Duration {
        QUICK_TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, _args: NoArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let processes = self.manager.list(&ctx.session);
        if processes.is_empty() {
            return Ok("no background processes".to_owned());
        }
        let lines: Vec<String> = processes.iter().map(ToString::to_string).collect();
        Ok(lines.join("\n"))
    }

    async fn shutdown(&self) {
        self.manager.shutdown().await;
    }
}
