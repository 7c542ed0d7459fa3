//! Entry points for `flynn-fuzz`: how the gateway reads a request's
//! credentials, origin and JSON-RPC parameters. Not part of the API.

use axum::http::HeaderMap;
use jsonrpsee::types::Params;

use crate::api::{HistoryParams, SendParams};
use crate::auth::{self, Via};

/// The token a request presents (`Authorization: Bearer`, or `?token=`
/// on a WebSocket upgrade).
pub fn presented_token(headers: &HeaderMap, query: Option<&str>, upgrade: bool) -> Option<String> {
    auth::presented_token(headers, query, upgrade)
}

/// `?token=`'s value decoded.
pub fn percent_decode(text: &str) -> String {
    auth::percent_decode(text)
}

/// Whether the request's `Origin` is one the gateway trusts.
pub fn origin_allowed(headers: &HeaderMap, allowed: &[String], tailscale: bool) -> bool {
    let via = if tailscale { Via::Tailscale } else { Via::Main };
    auth::origin_allowed(headers, allowed, via)
}

/// `agent.send`'s and `sessions.history`'s parameters read from `text`:
/// whether each was accepted.
pub fn params(text: &str) -> (bool, bool) {
    let params = Params::new(Some(text));
    (
        crate::rpc::parse_params::<SendParams>(&params).is_ok(),
        crate::rpc::parse_params::<HistoryParams>(&params).is_ok(),
    )
}
