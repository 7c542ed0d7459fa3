use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::sandbox::Sandbox;
use crate::{ToolContext, ToolError, TypedTool};

/// Bytes kept from each of stdout and stderr; the executor truncates
/// further to the configured output limit.
const CAPTURE_LIMIT: usize = 1024 * 1024;

/// `shell.exec`: runs a command with `sh -c` in the sandbox and returns its
/// output.
#[derive(Debug, Clone)]
pub struct ShellExec {
    timeout: Duration,
    sandbox: Arc<Sandbox>,
}

impl ShellExec {
    pub fn new(timeout: Duration, sandbox: Arc<Sandbox>) -> Self {
        ShellExec { timeout, sandbox }
    }
}

/// Arguments of `shell.exec`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command line, run with `sh -c`.
    command: String,
    /// Working directory, relative to the workspace.
    cwd: Option<String>,
}

#[async_trait]
impl TypedTool for ShellExec {
    type Args = ShellArgs;

    fn name(&self) -> &str {
        "shell.exec"
    }

    fn description(&self) -> &str {
        "Run a shell command and return its stdout, stderr and exit code."
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::RunsProcesses
    }

    async fn run(&self, args: ShellArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let cwd = match &args.cwd {
            Some(dir) => ctx.confine(dir)?,
            None => ctx.workspace.clone(),
        };
        // Dropping the child (a timeout or cancellation drops this future)
        // kills its whole process group, so no grandchild outlives the call.
        let mut child = self
            .sandbox
            .spawn(&args.command, &cwd, &ctx.workspace)
            .await?;
        let stdout = child.take_stdout();
        let stderr = child.take_stderr();
        let (status, stdout, stderr) = tokio::join!(child.wait(), capture(stdout), capture(stderr));
        let status = status.map_err(|e| ToolError::failed(format!("waiting for sh: {e}")))?;

        let mut out = stdout;
        if !stderr.is_empty() {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("[stderr]\n");
            out.push_str(&stderr);
        }
        match status.code() {
            Some(0) => {}
            Some(code) => {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&format!("[exit code {code}]"));
            }
            None => {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str("[killed by a signal]");
            }
        }
        Ok(out)
    }
}

async fn capture(pipe: Option<impl AsyncRead + Unpin>) -> String {
    let Some(pipe) = pipe else {
        return String::new();
    };
    let mut buf = Vec::new();
    let mut limited = pipe.take(CAPTURE_LIMIT as u64);
    // A read error ends capture; what was read is still reported.
    let _ = limited.read_to_end(&mut buf).await;
    // Drain the rest so the command is not blocked on a full pipe.
    let mut rest = limited.into_inner();
    let mut sink = [0u8; 8192];
    while matches!(rest.read(&mut sink).await, Ok(n) if n > 0) {}
    String::from_utf8_lossy(&buf).into_owned()
}
