//! flynn-mcp against real MCP servers, in real processes and over real
//! HTTP: the fixture server of `flynn_testkit::mcp` (written with rmcp,
//! over stdio as the `flynn-mcp-fixture` binary and over streamable HTTP
//! behind a bearer token), and the reference server from npm
//! (`scripts/install-mcp-reference.sh`, named by `FLYNN_MCP_REFERENCE`).
//! Every call goes through Flynn's own `ToolExecutor`, as a turn makes it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http;
mod lifecycle;
mod reference;
mod stdio;
mod support;
