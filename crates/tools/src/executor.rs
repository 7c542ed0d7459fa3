use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use flynn_protocol::config::{HookAction, ToolsConfig};
use flynn_protocol::{ImageSource, ToolCall, ToolEffect, ToolResult};

use crate::gate::{ApprovalRequest, confirm};
use crate::taint::{self, Hold};
use crate::tool::{AttachedImage, Attachments, MAX_IMAGE_BYTES, MAX_IMAGE_SIDE};
use crate::{
    AuditLog, AuditRecord, GuardedCall, Hooks, Redactor, Tool, ToolCatalog, ToolContext, ToolError,
    ToolPolicy, ToolRegistry, wrap_untrusted,
};

/// How long a confirmation waits when no config says otherwise.
const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs tool calls: looks the tool up, passes the call through the gate
/// (the agent's policy, then the hooks or the autonomy level, an approver
/// when they say confirm, and confirmation for risky tools once untrusted
/// content is in the turn), then enforces the tool's timeout and the turn's
/// cancellation, truncates long output, wraps web output as untrusted,
/// keeps configured secrets out of what the model sees, records the call in
/// the audit log, and reports every failure to the model as an error result.
#[derive(Debug, Clone)]
pub struct ToolExecutor {
    registry: Arc<ToolRegistry>,
    output_limit: usize,
    hooks: Hooks,
    confirm_timeout: Duration,
    redactor: Redactor,
    audit: Option<Arc<AuditLog>>,
    /// `tools.deferred`; `None` for the built-in list.
    deferred: Option<Vec<String>>,
    /// Directories no tool may touch (FLYNN_HOME), for turns' contexts.
    hidden: Arc<[PathBuf]>,
}

/// What the gate did with a call, for the audit record.
#[derive(Debug, Default)]
struct GateTrace {
    action: Option<HookAction>,
    reason: Option<String>,
}

impl ToolExecutor {
    /// `output_limit` is in bytes (the config's `tools.output_limit_bytes`).
    /// No hooks, no audit log, no secrets to redact: every allowed call
    /// runs as the policy's autonomy says.
    pub fn new(registry: Arc<ToolRegistry>, output_limit: usize) -> Self {
        ToolExecutor {
            registry,
            output_limit,
            hooks: Hooks::default(),
            confirm_timeout: DEFAULT_CONFIRM_TIMEOUT,
            redactor: Redactor::default(),
            audit: None,
            deferred: None,
            hidden: Arc::from(Vec::new()),
        }
    }

    /// With `tools.output_limit_bytes`, `tools.hooks` and
    /// `tools.confirm_timeout_secs`. The audit log is added with
    /// [`with_audit`](Self::with_audit), since its default place depends on
    /// FLYNN_HOME.
    pub fn from_config(registry: Arc<ToolRegistry>, config: &ToolsConfig) -> Self {
        ToolExecutor {
            hooks: Hooks::new(&config.hooks),
            confirm_timeout: Duration::from_secs(config.confirm_timeout_secs),
            deferred: config.deferred.clone(),
            ..ToolExecutor::new(registry, config.output_limit_bytes)
        }
    }

    /// Records every call in `audit`.
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Keeps these secrets out of results, error messages, logs and the
    /// audit log.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// Keeps file tools out of these directories even inside a workspace
    /// (FLYNN_HOME when the owner names a workspace around it).
    pub fn with_hidden(mut self, hidden: Vec<PathBuf>) -> Self {
        self.hidden = hidden.into();
        self
    }

    /// What [`with_hidden`](Self::with_hidden) set: a turn puts it in its
    /// [`ToolContext`].
    pub fn hidden(&self) -> Arc<[PathBuf]> {
        self.hidden.clone()
    }

    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// A turn's view of the tools for `policy`, with the deferred ones
    /// (`tools.deferred`) held back until `tools.search` finds them.
    pub fn catalog(&self, policy: Arc<ToolPolicy>) -> ToolCatalog {
        ToolCatalog::new(self.registry.clone(), policy, self.deferred.as_deref())
    }

    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.as_deref()
    }

    /// Whether a hook holds every call of `tool` until an approver
    /// answers, whatever the autonomy.
    pub fn needs_confirmation(&self, tool: &str) -> bool {
        self.hooks.rule(tool) == Some(HookAction::Confirm)
    }

    /// The call with its tool's dotted name when the model called a tool
    /// by its wire name without having been offered it (`process_start`
    /// for a deferred `process.start` it did not look up with
    /// `tools.search`): the name is mapped back only for requests that
    /// offered the tool. A tool the agent may use is then offered for the
    /// rest of the turn, as if found; the gate decides on the dotted name
    /// as for any call. Any other call is returned as it is.
    pub fn resolve(&self, call: &ToolCall, ctx: &ToolContext) -> ToolCall {
        if self.registry.get(&call.name).is_some() {
            return call.clone();
        }
        let tools = self.registry.tools();
        let mut matching = tools
            .iter()
            .filter(|tool| flynn_protocol::wire_name(tool.name()) == call.name);
        let (Some(tool), None) = (matching.next(), matching.next()) else {
            return call.clone();
        };
        if ctx.policy.permits(tool.as_ref())
            && let Some(catalog) = &ctx.catalog
        {
            catalog.reveal(tool.name());
        }
        ToolCall {
            name: tool.name().to_owned(),
            ..call.clone()
        }
    }

    /// Runs one call through the gate and the tool. Never fails: an
    /// unknown tool, a denial, a timeout or a cancellation is an error
    /// result for the model.
    pub async fn execute(&self, call: &ToolCall, ctx: &ToolContext) -> ToolResult {
        let resolved = self.resolve(call, ctx);
        let call = &resolved;
        let started = Instant::now();
        let tool = self.registry.get(&call.name);
        let mut gate = GateTrace::default();
        // The call's own attachments: calls of one batch run together.
        let call_ctx = ToolContext {
            attachments: Attachments::default(),
            ..ctx.clone()
        };
        let outcome = self.run(tool.as_ref(), call, &call_ctx, &mut gate).await;
        let attached = call_ctx.attachments.take();
        let elapsed = started.elapsed();
        let (content, is_error, label, quoted) = match outcome {
            Ok(output) => (output, false, "ok", None),
            Err(ToolError::FailedQuoting { message, quoted }) => {
                (message, true, "error", Some(quoted))
            }
            Err(error) => {
                let label = outcome_label(&error);
                (error.to_string(), true, label, None)
            }
        };
        // The model never sees a configured secret, whatever the tool read.
        let content = self.redactor.known(&content);
        let mut output_bytes = content.len();
        let mut content = truncate_output(&content, self.output_limit);
        let mut untrusted = !is_error && tool.as_ref().is_some_and(|tool| tool.untrusted_output());
        if untrusted {
            ctx.provenance.mark_untrusted(&call.name, &content);
            content = wrap_untrusted(&call.name, &content);
        }
        // What an outside party said in a failure is untrusted whatever the
        // tool: it follows Flynn's own words, wrapped.
        if let Some(quoted) = quoted {
            let quoted = self.redactor.known(&quoted);
            output_bytes += quoted.len();
            let quoted = truncate_output(&quoted, self.output_limit);
            ctx.provenance.mark_untrusted(&call.name, &quoted);
            content = format!("{content}:\n{}", wrap_untrusted(&call.name, &quoted));
            untrusted = true;
        }
        // Images are data, like the text they come with (and, from an
        // untrusted tool, just as untrusted: the turn is marked above);
        // the notes about them are Flynn's, outside any wrapping.
        let images = if is_error {
            Vec::new()
        } else {
            images(attached, &mut content)
        };
        if let Some(audit) = &self.audit {
            audit.record(&AuditRecord {
                time_ms: now_ms(),
                session: ctx.session.to_string(),
                principal: ctx.principal.to_string(),
                agent: ctx.agent.clone(),
                turn: ctx.turn.map(|turn| turn.0),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                effect: tool.as_ref().map(|tool| tool.effect().as_str()),
                gate: gate.action.map(action_label),
                gate_reason: gate.reason,
                outcome: label,
                duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                arguments: self.redactor.json(&call.arguments),
                output: AuditRecord::clip(&self.redactor.all(&content)),
                output_bytes,
                untrusted,
            });
        }
        ToolResult {
            tool_use_id: call.id.clone(),
            content,
            is_error,
            images,
        }
    }

    async fn run(
        &self,
        tool: Option<&Arc<dyn Tool>>,
        call: &ToolCall,
        ctx: &ToolContext,
        gate: &mut GateTrace,
    ) -> Result<String, ToolError> {
        let Some(tool) = tool else {
            // Name only the tools this agent may use, as the model calls
            // them (every one of them may be called by that name, offered
            // yet or not: see `resolve`).
            let tools = self.registry.tools();
            let available: Vec<String> = tools
                .iter()
                .filter(|tool| ctx.policy.permits(tool.as_ref()))
                .map(|tool| flynn_protocol::wire_name(tool.name()))
                .collect();
            return Err(ToolError::UnknownTool {
                name: call.name.clone(),
                available: if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                },
            });
        };
        if !ctx.policy.permits(tool.as_ref()) {
            let reason = if ctx.policy.allows(&call.name) {
                format!(
                    "agent '{}' is read-only (tools.autonomy: read_only) and this tool changes things",
                    ctx.agent
                )
            } else {
                format!("not allowed for agent '{}' by the tools policy", ctx.agent)
            };
            return Err(ToolError::Denied {
                tool: call.name.clone(),
                reason,
            });
        }
        // A skill the model is following limits the turn to what it
        // declared.
        ctx.guards
            .check(&GuardedCall {
                tool: &call.name,
                effect: tool.effect(),
                arguments: &call.arguments,
                workspace: &ctx.workspace,
            })
            .map_err(|reason| ToolError::Denied {
                tool: call.name.clone(),
                reason,
            })?;
        // A call of a cancelled turn asks no one and runs nothing.
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled {
                tool: call.name.clone(),
            });
        }
        let effect = tool.effect();
        let mut action = self.hooks.decide(&call.name, effect, ctx.policy.autonomy());
        // Text from a web page must not be able to drive the agent's
        // hands, read the owner's data or send it out (see `taint`).
        let mut person_only = false;
        match taint::hold(tool.as_ref(), call, ctx) {
            Hold::Free => {}
            Hold::Refuse(reason) => {
                gate.reason = Some(reason.clone());
                return Err(ToolError::Denied {
                    tool: call.name.clone(),
                    reason,
                });
            }
            Hold::Ask(reason) => {
                if action != HookAction::Confirm {
                    action = HookAction::Confirm;
                    gate.reason = Some(reason);
                }
            }
            Hold::Person(reason) => {
                action = HookAction::Confirm;
                person_only = true;
                gate.reason = Some(reason);
            }
        }
        gate.action = Some(action);
        if person_only && ctx.approver.is_automatic() {
            return Err(ToolError::Denied {
                tool: call.name.clone(),
                reason: format!(
                    "only a person may approve this call, because {}; approve-all (--yes) does not answer for it. \
                     Ask the owner to run it, to send /trust once the content is known to be safe, \
                     or to set tools.taint: allow for agent '{}'",
                    gate.reason.as_deref().unwrap_or_default(),
                    ctx.agent
                ),
            });
        }
        match action {
            HookAction::Silent => {}
            HookAction::Log => {
                tracing::info!(
                    target: "flynn::audit",
                    session = %ctx.session,
                    agent = %ctx.agent,
                    tool = %call.name,
                    arguments = %self.redactor.json(&call.arguments),
                    "tool call"
                );
            }
            HookAction::Confirm => {
                let request = ApprovalRequest {
                    session: ctx.session.clone(),
                    agent: ctx.agent.clone(),
                    turn: ctx.turn,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    input: call.arguments.clone(),
                    effect,
                    timeout: self.confirm_timeout,
                    reason: gate.reason.clone(),
                };
                confirm(&request, ctx).await.map_err(|error| match error {
                    // Say why this call needed a person at all.
                    ToolError::Denied { tool, reason } if request.reason.is_some() => {
                        ToolError::Denied {
                            reason: format!(
                                "{reason} (it asked because {})",
                                request.reason.as_deref().unwrap_or_default()
                            ),
                            tool,
                        }
                    }
                    other => other,
                })?;
            }
        }
        // The tool's own time starts only now, after any confirmation.
        let timeout = tool.timeout();
        let result = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled { tool: call.name.clone() }),
            result = tokio::time::timeout(timeout, tool.call(call.arguments.clone(), ctx)) => {
                result.unwrap_or_else(|_| Err(ToolError::Timeout { tool: call.name.clone(), after: timeout }))
            }
        };
        // A file the turn wrote is its own data: reading it back is free.
        if result.is_ok()
            && effect == ToolEffect::WritesFiles
            && let Some(path) = call
                .arguments
                .get("path")
                .and_then(serde_json::Value::as_str)
            && let Ok(resolved) = ctx.confine(path)
        {
            ctx.provenance.record_written(&resolved);
        }
        result
    }
}

/// The images a call attached, as they go to the model, with a note in
/// `content` for each: attached, or left out for its size.
fn images(attached: Vec<AttachedImage>, content: &mut String) -> Vec<ImageSource> {
    let mut images = Vec::new();
    for AttachedImage { media_type, data } in attached {
        let bytes = data.len();
        let side = png_size(&data).filter(|(w, h)| *w.max(h) > MAX_IMAGE_SIDE);
        let note = if bytes > MAX_IMAGE_BYTES {
            format!(
                "[an image ({media_type}, {bytes} bytes) was not attached: images in tool results may have at most {MAX_IMAGE_BYTES} bytes]"
            )
        } else if let Some((w, h)) = side {
            format!(
                "[an image ({media_type}, {w}x{h} px) was not attached: images in tool results may have at most {MAX_IMAGE_SIDE} px a side]"
            )
        } else {
            let note = format!(
                "[an image ({media_type}, {bytes} bytes) is attached after the tool results]"
            );
            images.push(ImageSource::Base64 {
                data: base64::engine::general_purpose::STANDARD.encode(&data),
                media_type,
            });
            note
        };
        if !content.is_empty() {
            content.push('\n');
        }
        content.push_str(&note);
    }
    images
}

/// A PNG's width and height, from its header.
fn png_size(data: &[u8]) -> Option<(u32, u32)> {
    if !data.starts_with(b"\x89PNG\r\n\x1a\n") || data.get(12..16)? != b"IHDR" {
        return None;
    }
    let number = |at: usize| Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?));
    Some((number(16)?, number(20)?))
}

fn outcome_label(error: &ToolError) -> &'static str {
    match error {
        ToolError::UnknownTool { .. } => "unknown_tool",
        ToolError::InvalidArguments { .. } => "invalid_arguments",
        ToolError::Timeout { .. } => "timeout",
        ToolError::Cancelled { .. } => "cancelled",
        ToolError::Denied { .. } => "denied",
        ToolError::Failed(_) | ToolError::FailedQuoting { .. } => "error",
    }
}

fn action_label(action: HookAction) -> &'static str {
    match action {
        HookAction::Confirm => "confirm",
        HookAction::Log => "log",
        HookAction::Silent => "silent",
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Cuts `output` to at most `limit` bytes (on a character boundary) and
/// says so at the end, so the model knows it saw only part.
pub fn truncate_output(output: &str, limit: usize) -> String {
    if output.len() <= limit {
        return output.to_owned();
    }
    let end = output.floor_char_boundary(limit);
    format!(
        "{}\n[output truncated: showed {end} of {} bytes]",
        &output[..end],
        output.len()
    )
}
