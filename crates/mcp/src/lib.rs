//! Flynn and the Model Context Protocol.
//!
//! **As a server**, [`serve::FlynnServer`] offers `send_message`,
//! `list_sessions`, `read_history`, `search_memory` and `list_agents` over
//! any [`FlynnHost`]; the gateway serves it at `/mcp` and `flynn mcp serve`
//! on stdio.
//!
//! **As a client**, every server under `mcp.servers` becomes a
//! [`ToolSource`](flynn_tools::ToolSource) of the tool registry: started
//! with Flynn (`start: boot`) or before the first turn of an agent that may
//! use it (`start: lazy`), over stdio (`command`, `args`, `env`) or
//! streamable HTTP (`url`, `headers`, `bearer_token`); restarted with
//! backoff (1 s doubling to 60 s) when it dies; its tools listed again when
//! it sends `notifications/tools/list_changed`; stopped with Flynn. Its
//! tools are offered as `<server>.<tool>` and run through the same
//! executor as the built-in ones: the agent's policy, confirmation, the
//! audit log, the per-server `timeout_secs`, cancellation (the server is
//! sent `notifications/cancelled`). Unless the owner marks the server
//! `trusted`, every tool counts as acting on the world and its output as
//! untrusted content, whatever the server's hints say; a trusted server's
//! tool counts as read-only when it says so (`readOnlyHint`), and its
//! output as trusted when it says it stays in a closed world
//! (`openWorldHint: false`).
//!
//! A stdio server gets a clean environment: only the basic variables
//! (`PATH`, `HOME`, `LANG`...) and its own `env`, never Flynn's API keys.
//! It runs in its own process group, so the whole tree stops with it.

mod bridge;
mod client;
pub mod serve;

pub use client::{McpServer, McpServers, Phase, ServerStatus, Unreachable};
pub use serve::{FlynnHost, FlynnServer, HostError};
