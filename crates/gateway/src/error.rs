//! The protocol's error codes.
//!
//! JSON-RPC's own codes for frames that are not valid requests; one code
//! per Flynn failure kind otherwise, with `data.kind` naming it in words.

use flynn_protocol::ErrorCode;
use jsonrpsee::types::ErrorObjectOwned;
use serde_json::json;

pub(crate) use flynn_api::codes;

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
