//! Tools for Flynn: what the model can do besides talk.
//!
//! Tool authors implement [`TypedTool`] with an argument struct that derives
//! `Deserialize` + `JsonSchema`; the [`ToolRegistry`] erases the type and
//! serialises every tool's spec for the providers. The [`ToolExecutor`] runs
//! calls with a timeout, cancellation and output truncation, and turns every
//! failure into a tool result the model can read.

pub mod builtin;
mod error;
mod executor;
mod registry;
mod tool;

pub use error::ToolError;
pub use executor::{ToolExecutor, truncate_output};
pub use registry::ToolRegistry;
pub use tool::{Tool, ToolContext, TypedTool, into_dyn};
