//! Tools for Flynn: what the model can do besides talk.
//!
//! Tool authors implement [`TypedTool`] with an argument struct that derives
//! `Deserialize` + `JsonSchema`, and declare the tool's [`ToolEffect`]
//! (read-only tools may run in parallel); the [`ToolRegistry`] erases the
//! type and serialises every tool's spec for the providers, all of them or
//! only those an agent's [`ToolPolicy`] allows ([`ToolRegistry::specs_for`]).
//!
//! The [`ToolExecutor`] runs a call through the gate first: the agent's
//! [`ToolPolicy`] (a profile, `enabled` and `deny` globs), then the
//! [`Hooks`] (`tools.hooks`: confirm, log or silent), then, when a hook says
//! confirm, the context's [`Approver`], bounded by
//! `tools.confirm_timeout_secs` and the turn's cancellation, with a
//! [`GateObserver`] told how it went. Only then does the tool's own timeout
//! start; output is truncated, and every failure, a denial included,
//! becomes a tool result the model can read.
//!
//! `shell.exec` and the `process.*` tools run commands in the OS
//! [`sandbox`] that `tools.sandbox` configures (bubblewrap, Docker,
//! Landlock or none).
//!
//! [`ToolEffect`]: flynn_protocol::ToolEffect

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod audit;
pub mod builtin;
mod catalog;
mod confine;
mod error;
mod executor;
mod gate;
mod glob;
mod guard;
mod hooks;
mod policy;
mod provenance;
mod redact;
mod registry;
pub mod sandbox;
pub mod taint;
mod tool;

pub use audit::{AuditLog, AuditRecord};
pub use catalog::{DEFAULT_DEFERRED, TOOL_SEARCH, ToolCatalog};
pub use confine::confine;
pub use error::{SandboxError, ToolError};
pub use executor::{ToolExecutor, truncate_output};
pub use flynn_protocol::{is_untrusted, wrap_untrusted};
pub use gate::{ApprovalRequest, ApproveAll, Approver, Decision, DenyAll, GateObserver};
pub use guard::{CallGuard, GuardedCall, Guards};
pub use hooks::Hooks;
pub use policy::{ToolPolicy, UnknownTools};
pub use provenance::Provenance;
pub use redact::{REDACTED, Redactor, env_secrets};
pub use registry::{ToolRegistry, ToolSource};
pub use sandbox::find_program;
pub use tool::{
    AttachedImage, Attachments, MAX_IMAGE_BYTES, MAX_IMAGE_SIDE, Tool, ToolContext, TypedTool,
    into_dyn,
};
