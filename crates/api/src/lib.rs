//! Flynn's gateway protocol as Rust types: every JSON-RPC method's name,
//! parameters, result and the scopes that may call it; every
//! subscription's notification; the error codes. The gateway serves these
//! methods, `flynn-client` calls them, and `docs/protocol.schema.json` is
//! generated from them ([`schema::protocol_schema`], `cargo xtask
//! codegen`), so the three cannot drift apart.
//!
//! A method is a unit type that implements [`Method`]
//! ([`methods::SessionsList`], say); a subscription implements
//! [`Subscription`]. [`METHODS`] lists them all.

mod methods_def;
pub mod schema;
mod types;

use flynn_protocol::config::TokenScope;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use methods_def::{METHODS, SCOPES, methods};
pub use types::*;

/// The protocol's version, reported by `system.version`.
pub const PROTOCOL_VERSION: u32 = 1;

/// The file in `FLYNN_HOME` where a daemon keeps the token it generated,
/// for the CLI and the TUI on the same machine.
pub const TOKEN_FILE: &str = "gateway.token";

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

/// A JSON-RPC method: a request and its one answer.
pub trait Method {
    /// The name on the wire (`sessions.list`).
    const NAME: &'static str;
    /// The token scopes that may call it (any one of them; `admin` always
    /// may).
    const SCOPES: &'static [TokenScope];
    /// One line for the schema and the docs.
    const SUMMARY: &'static str;
    /// The parameters: one object, by name ([`NoParams`] for none).
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static;
    /// What the method answers.
    type Output: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static;
}

/// A JSON-RPC subscription: a request, then notifications until the
/// client unsubscribes (or the server ends it).
pub trait Subscription {
    /// The subscribe method's name (`agent.send`).
    const NAME: &'static str;
    /// The notifications' method name (`agent.event`).
    const NOTIFICATION: &'static str;
    /// The unsubscribe method's name (`agent.unsubscribe`).
    const UNSUBSCRIBE: &'static str;
    const SCOPES: &'static [TokenScope];
    const SUMMARY: &'static str;
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static;
    /// Each notification's parameters.
    type Item: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static;
}

/// The parameters of a method that takes none: omitted, `null` or `{}`
/// on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl JsonSchema for NoParams {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoParams".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": ["object", "null"],
            "additionalProperties": false,
            "description": "no parameters (omit them, or send {})",
        })
    }
}

/// Whether a method answers once or streams notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Method,
    /// With its notification and unsubscribe method names.
    Subscription {
        notification: &'static str,
        unsubscribe: &'static str,
    },
}

/// One method or subscription, as the schema and the gateway's scope
/// check see it.
#[derive(Debug, Clone, Copy)]
pub struct MethodInfo {
    pub name: &'static str,
    pub kind: Kind,
    pub scopes: &'static [TokenScope],
    pub summary: &'static str,
    /// The parameters' schema.
    pub params: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    /// The result's schema (a subscription's notification parameters).
    pub output: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
}

fn schema_of<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<T>()
}

impl MethodInfo {
    pub const fn method<M: Method>() -> MethodInfo {
        MethodInfo {
            name: M::NAME,
            kind: Kind::Method,
            scopes: M::SCOPES,
            summary: M::SUMMARY,
            params: schema_of::<M::Params>,
            output: schema_of::<M::Output>,
        }
    }

    pub const fn subscription<S: Subscription>() -> MethodInfo {
        MethodInfo {
            name: S::NAME,
            kind: Kind::Subscription {
                notification: S::NOTIFICATION,
                unsubscribe: S::UNSUBSCRIBE,
            },
            scopes: S::SCOPES,
            summary: S::SUMMARY,
            params: schema_of::<S::Params>,
            output: schema_of::<S::Item>,
        }
    }
}

/// The scopes that may call `name` (any one of them); `None` for a name
/// that is no method of the protocol.
pub fn scopes_of(name: &str) -> Option<&'static [TokenScope]> {
    SCOPES
        .iter()
        .find(|(method, _)| *method == name)
        .map(|(_, scopes)| *scopes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_table_names_every_method_with_its_declared_scopes() {
        let from_methods: Vec<(&str, &[TokenScope])> = METHODS
            .iter()
            .map(|method| (method.name, method.scopes))
            .collect();
        assert_eq!(SCOPES.to_vec(), from_methods);
        assert_eq!(scopes_of("tools.invoke"), Some(&[TokenScope::Admin][..]));
        assert_eq!(scopes_of("agent.fly"), None);
    }
}
