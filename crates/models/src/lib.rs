//! Model clients for Flynn.
//!
//! [`ModelClient`] is the one trait every provider implements: a single
//! streaming call, with the non-streaming call provided on top of it.
//! Providers speak their vendor's wire format in private `wire` modules;
//! everything outside this crate sees only `flynn-protocol` types and the
//! request/response types defined here. [`ModelRouter`] picks a model for a
//! tier and falls back along the configured chain.
//! [`ContextWindows`] says how many tokens a model takes (config, the
//! server's answer, a built-in table), and a [`TokenCounter`] counts a
//! prompt before it is sent.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod anthropic;
#[cfg(feature = "bedrock")]
mod bedrock;
#[doc(hidden)]
pub mod bench;
mod client;
mod context_window;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod http;
pub mod hub;
#[cfg(feature = "local-llm")]
mod local;
mod locality;
mod openai;
mod preset;
mod pricing;
mod probe;
mod provider;
mod router;
mod tokens;
mod vision;

#[cfg(feature = "bedrock")]
pub use bedrock::{AwsCredentials, build_bedrock_client};
pub use client::{
    ClientInfo, ModelClient, ModelRequest, ModelResponse, ModelStream, StopReason, StreamEvent,
    drain,
};
pub use context_window::{ContextWindow, ContextWindows, WindowSource, known_context_window};
pub use error::{Error, Result};
pub use flynn_protocol::ToolNameMap;
#[cfg(feature = "local-llm")]
pub use local::{GgufInfo, LocalClient, inspect as inspect_gguf};
pub use pricing::{PriceTable, cost};
pub use probe::{Probe, probe};
pub use provider::build_client;
pub use router::Jitter;
pub use router::{Attempt, ModelRouter, NO_PROVIDER, RoutedStream};
#[cfg(feature = "tiktoken")]
pub use tokens::Tiktoken;
pub use tokens::{
    Encoding, Estimate, IMAGE_TOKENS, MESSAGE_OVERHEAD, TokenCounter, encoding_for_model,
    token_counter,
};
pub use vision::known_image_input;
