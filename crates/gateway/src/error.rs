//! The protocol's error codes.
//!
//! JSON-RPC's own codes for frames that are not valid requests; one code
//! per Flynn failure kind otherwise, with `data.kind` naming it in words.

use flynn_protocol::ErrorCode;
use jsonrpsee::types::ErrorObjectOwned;
use serde_json::json;

/// Codes beyond JSON-RPC's own (-32700 parse error, -32600 invalid
/// request, -32601 method not found, -32602 invalid params, -32603
/// internal error).
pub mod codes {
    /// Anything else that went wrong inside Flynn.
    pub const INTERNAL: i32 = -32000;
    /// This client made too many requests; `data.retry_after_secs` says
    /// when to try again.
    pub const RATE_LIMITED: i32 = -32002;
    /// Refused before it was accepted: unknown agent, a full queue, an
    /// empty message.
    pub const REFUSED: i32 = -32003;
    /// No such session, confirmation or tool.
    pub const NOT_FOUND: i32 = -32004;
    /// The daemon is shutting down and takes no new messages.
    pub const SHUTTING_DOWN: i32 = -32005;
    /// The config (or a change to it) is invalid.
    pub const CONFIG: i32 = -32010;
    /// The model provider failed after retries and fallback.
    pub const PROVIDER: i32 = -32011;
    /// The session store failed.
    pub const STORAGE: i32 = -32012;
    /// The turn was cancelled.
    pub const CANCELLED: i32 = -32013;
    /// This token's scopes do not allow the call, or the session is not
    /// its own; `data.scope` names the scope needed, when one would do.
    pub const FORBIDDEN: i32 = -32014;
}

/// An error for a client: a code, a message and `data.kind`.
pub(crate) fn rpc_error(code: i32, kind: &str, message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), Some(json!({ "kind": kind })))
}

pub(crate) fn invalid_params(message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        jsonrpsee::types::error::INVALID_PARAMS_CODE,
        message.into(),
        Some(json!({ "kind": "invalid_params" })),
    )
}

pub(crate) fn not_found(message: impl Into<String>) -> ErrorObjectOwned {
    rpc_error(codes::NOT_FOUND, "not_found", message)
}

pub(crate) fn internal(message: impl Into<String>) -> ErrorObjectOwned {
    rpc_error(codes::INTERNAL, "internal", message)
}

/// The code and kind of a runtime error.
pub(crate) fn from_orchestrator(error: &flynn_orchestrator::Error) -> ErrorObjectOwned {
    if matches!(error, flynn_orchestrator::Error::ShuttingDown) {
        return rpc_error(codes::SHUTTING_DOWN, "shutting_down", error.to_string());
    }
    from_code(error.code(), error.to_string())
}

pub(crate) fn from_code(code: ErrorCode, message: String) -> ErrorObjectOwned {
    let (number, kind) = match code {
        ErrorCode::Config => (codes::CONFIG, "config"),
        ErrorCode::Provider => (codes::PROVIDER, "provider"),
        ErrorCode::Storage => (codes::STORAGE, "storage"),
        ErrorCode::Cancelled => (codes::CANCELLED, "cancelled"),
        ErrorCode::Refused => (codes::REFUSED, "refused"),
        ErrorCode::Internal => (codes::INTERNAL, "internal"),
    };
    rpc_error(number, kind, message)
}

pub(crate) fn storage(error: &flynn_sessions::Error) -> ErrorObjectOwned {
    rpc_error(codes::STORAGE, "storage", error.to_string())
}
