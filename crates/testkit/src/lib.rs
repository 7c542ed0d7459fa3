//! Test-only fake servers for the external APIs Flynn talks to.
//!
//! Each fake binds `127.0.0.1:0` on a thread of its own, speaks its vendor's
//! documented wire format (server-sent events included), records every
//! request for assertions, and fails loudly on a protocol violation: it
//! answers with the vendor's error and lists the problem in `violations()`.
//! Replies are scripted: push one [`Reply`] per expected request. The
//! search engine fakes ([`FakeBrave`], [`FakeSearxng`], [`FakeTavily`],
//! [`FakeDuckDuckGo`]) serve the hits they are given instead.
//! [`FakeRedirect`] answers everything with a redirect to another server.
//! [`FakeHub`] is the Hugging Face hub's file downloads (redirects to a
//! content store, checksums, byte ranges).
//! [`FakeTailscaled`] is tailscaled's LocalAPI (`whois`) on a Unix socket.
//!
//! ```no_run
//! # async fn example() {
//! use flynn_testkit::{FakeOpenAi, Reply};
//!
//! let fake = FakeOpenAi::start().await;
//! fake.push(Reply::Text("Hello!".into()));
//! // ... point a client at fake.base_url() and make one call ...
//! assert_eq!(fake.violations(), Vec::<String>::new());
//! assert_eq!(fake.requests()[0].body["model"], "gpt-4o-mini");
//! # }
//! ```
//!
//! The documented examples the fakes reproduce are kept in `fixtures/` and
//! exported as [`fixtures`]. With the `sessions` feature, `store` holds
//! `RealTimeStore`: the real session store, usable on a paused clock.
//! [`mcp`] is a real MCP server built on rmcp, over stdio (the
//! `flynn-mcp-fixture` binary) or streamable HTTP behind a token.
//!
//! In-process stand-ins, each behind its feature: `scripted::ScriptedModel`
//! (`models`), a model client that answers from a script;
//! `chat::MemoryChannel` (`chat`), a chat platform in memory; and
//! `runtime` (`runtime`), the real agent runtime over scripted models
//! and a real store, for the tests of the crates above it.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod anthropic;
#[cfg(feature = "bedrock")]
pub mod bedrock;
#[cfg(feature = "chat")]
pub mod chat;
pub mod discord;
pub mod embeddings;
pub mod fixtures;
mod hub;
mod llamacpp;
pub mod mcp;
mod ollama;
mod openai;
mod redirect;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "models")]
pub mod scripted;
mod search;
mod server;
mod site;
pub mod slack;
#[cfg(feature = "sessions")]
pub mod store;
pub mod tailscale;
pub mod telegram;
pub mod whatsapp;

pub use anthropic::FakeAnthropic;
#[cfg(feature = "bedrock")]
pub use bedrock::{FakeBedrock, bedrock_error};
pub use embeddings::{FakeEmbeddings, Vendor, fake_embedding};
pub use hub::FakeHub;
pub use llamacpp::FakeLlamaCpp;
pub use ollama::FakeOllama;
pub use openai::FakeOpenAi;
pub use redirect::FakeRedirect;
pub use search::{FakeBrave, FakeDuckDuckGo, FakeSearxng, FakeTavily, SearchHit, SearchRequest};
pub use server::{CapturedRequest, INPUT_TOKENS, OUTPUT_TOKENS, Reply};
pub use site::FakeSite;
pub use tailscale::FakeTailscaled;
