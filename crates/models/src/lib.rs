//! Model clients for Flynn.
//!
//! [`ModelClient`] is the one trait every provider implements: a single
//! streaming call, with the non-streaming call provided on top of it.
//! Providers speak their vendor's wire format in private `wire` modules;
//! everything outside this crate sees only `flynn-protocol` types and the
//! request/response types defined here. [`ModelRouter`] picks a model for a
//! tier and falls back along the configured chain.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod anthropic;
mod client;
mod error;
mod http;
mod openai;
mod provider;
mod router;

pub use client::{
    ClientInfo, ModelClient, ModelRequest, ModelResponse, ModelStream, StopReason, StreamEvent,
    drain,
};
pub use error::{Error, Result};
pub use flynn_protocol::ToolNameMap;
pub use provider::build_client;
pub use router::{Attempt, ModelRouter, RoutedStream};
