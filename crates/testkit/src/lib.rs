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
//! [`FakeGoogle`] is Google's OAuth endpoints (loopback and device flows)
//! and the Gmail, Calendar, Drive, Docs and Tasks APIs on one server, with
//! accounts whose mail, events, files and tasks live in memory.
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
//! Each family of fakes is behind a cargo feature, so a crate's tests build
//! only the fakes they use: `providers` (the model providers' and embedding
//! APIs, the hub, [`fixtures`]), `bedrock` (Bedrock's Converse API),
//! `channels` (Telegram, Discord, Slack and WhatsApp), `search` (the search
//! engines), `google` (Google's OAuth and Workspace APIs) and `mcp` (the
//! MCP server and its binary). [`FakeSite`],
//! [`FakeRedirect`] and [`FakeTailscaled`] are always there. The default
//! features are these families, for this crate's own tests; the
//! workspace's dependency turns them off, and each crate names the ones it
//! uses.
//!
//! In-process stand-ins, each behind its feature: `scripted::ScriptedModel`
//! (`models`), a model client that answers from a script;
//! `chat::MemoryChannel` (`chat`), a chat platform in memory; and
//! `runtime` (`runtime`), the real agent runtime over scripted models
//! and a real store, for the tests of the crates above it.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "providers")]
mod anthropic;
#[cfg(feature = "bedrock")]
pub mod bedrock;
#[cfg(feature = "chat")]
pub mod chat;
#[cfg(feature = "channels")]
pub mod discord;
#[cfg(feature = "providers")]
pub mod embeddings;
#[cfg(feature = "providers")]
pub mod fixtures;
#[cfg(feature = "google")]
pub mod google;
#[cfg(feature = "providers")]
mod hub;
#[cfg(feature = "providers")]
mod llamacpp;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "providers")]
mod ollama;
#[cfg(feature = "providers")]
mod openai;
#[cfg(feature = "postgres")]
pub mod postgres;
mod redirect;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "models")]
pub mod scripted;
#[cfg(feature = "search")]
mod search;
mod server;
mod site;
#[cfg(feature = "channels")]
pub mod slack;
#[cfg(feature = "sessions")]
pub mod store;
#[cfg(feature = "voice")]
mod stt;
pub mod tailscale;
#[cfg(feature = "channels")]
pub mod telegram;
#[cfg(feature = "voice")]
mod tts;
#[cfg(feature = "channels")]
pub mod whatsapp;

#[cfg(feature = "providers")]
pub use anthropic::FakeAnthropic;
#[cfg(feature = "bedrock")]
pub use bedrock::{FakeBedrock, bedrock_error};
#[cfg(feature = "providers")]
pub use embeddings::{FakeEmbeddings, Vendor, fake_embedding};
#[cfg(feature = "google")]
pub use google::{FakeGoogle, GoogleRequest, Tokens};
#[cfg(feature = "providers")]
pub use hub::FakeHub;
#[cfg(feature = "providers")]
pub use llamacpp::FakeLlamaCpp;
#[cfg(feature = "providers")]
pub use ollama::FakeOllama;
#[cfg(feature = "providers")]
pub use openai::FakeOpenAi;
pub use redirect::FakeRedirect;
#[cfg(feature = "search")]
pub use search::{FakeBrave, FakeDuckDuckGo, FakeSearxng, FakeTavily, SearchHit, SearchRequest};
pub use server::{CapturedRequest, FormPart, INPUT_TOKENS, OUTPUT_TOKENS, Reply};
pub use site::FakeSite;
#[cfg(feature = "voice")]
pub use stt::{FakeStt, SttRequest};
pub use tailscale::FakeTailscaled;
#[cfg(feature = "voice")]
pub use tts::{FakeTts, OPENAI_VOICES, TtsRequest, fake_audio};
