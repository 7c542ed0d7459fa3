//! What each token may do: every protected HTTP route's scope (each
//! JSON-RPC method's is in `flynn_api::METHODS`), and the rules for
//! sessions.
//!
//! A client without `admin` owns the sessions of its own namespace: the
//! channel `token-<name>` (a `chat` token named `ide` owns `token-ide:*`).
//! It may send to, cancel and reset only those; with `read` it may read
//! every session, without it only its own. The namespace is part of the
//! session key, so ownership needs no storage and survives restarts.

use flynn_protocol::SessionKey;
use flynn_protocol::config::TokenScope;

use crate::auth::Client;

/// Every route behind the token and the scope it needs. `/rpc` lets
/// any token in: each method checks its own scope.
pub(crate) const ROUTES: &[(&str, Option<TokenScope>)] = &[
    ("/rpc", None),
    ("/mcp", Some(TokenScope::Chat)),
    ("/v1/models", Some(TokenScope::Chat)),
    ("/v1/chat/completions", Some(TokenScope::Chat)),
    ("/metrics", Some(TokenScope::Read)),
    ("/transcribe", Some(TokenScope::Chat)),
];

/// The scope a protected route needs: `Ok(None)` for `/rpc`, `Err` for a
/// path not in the table (refused).
pub(crate) fn of_route(path: &str) -> Result<Option<TokenScope>, ()> {
    // A sent file: any token, the id being the capability (see
    // `http::media`).
    if path.starts_with("/media/") {
        return Ok(None);
    }
    ROUTES
        .iter()
        .find(|(route, _)| *route == path)
        .map(|(_, scope)| *scope)
        .ok_or(())
}

/// The channel of a client's own sessions: `token-<name>`, with anything
/// a channel may not hold replaced by `-`.
pub(crate) fn namespace(kind: &str, name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{kind}-{clean}")
}

impl Client {
    /// Whether this client may act with `scope` (`admin` may do all).
    pub fn has(&self, scope: TokenScope) -> bool {
        self.scopes.contains(&TokenScope::Admin) || self.scopes.contains(&scope)
    }

    /// Whether this client holds the `admin` scope (the owner's token).
    pub fn is_admin(&self) -> bool {
        self.scopes.contains(&TokenScope::Admin)
    }

    /// Who the turns this client starts act for: the owner with `admin`;
    /// else a guest of the client's namespace (`guest:token-<name>:<name>`),
    /// contained like a chat guest: its own sessions and memory, the guest
    /// tool policy, confirmations asked of the owner.
    pub fn turn_principal(&self) -> flynn_protocol::Principal {
        if self.is_admin() {
            flynn_protocol::Principal::Owner
        } else {
            flynn_protocol::Principal::guest(&self.namespace, &self.name)
        }
    }

    /// Whether `session` belongs to this client: every session does for
    /// `admin`, else those of its namespace.
    pub fn owns(&self, session: &SessionKey) -> bool {
        self.is_admin() || session.channel() == self.namespace
    }

    /// Whether this client may read `session`.
    pub fn may_read(&self, session: &SessionKey) -> bool {
        self.owns(session) || self.has(TokenScope::Read)
    }

    /// The session a client gets when it names none: `gateway:default`
    /// for admin, else `<namespace>:default`.
    pub(crate) fn default_session(&self) -> SessionKey {
        if self.is_admin() {
            return crate::api::default_session();
        }
        SessionKey::new(&self.namespace, "default")
            .unwrap_or_else(|_| crate::api::default_session())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn admin_implies_every_scope_and_namespaces_bind_the_rest() {
        let peer = "127.0.0.1:1".parse().unwrap_or_else(|_| unreachable!());
        let chat = Client::token("ide", vec![TokenScope::Chat], peer);
        let admin = Client::token("default", vec![TokenScope::Admin], peer);
        let own: SessionKey = "token-ide:x".parse().unwrap_or_else(|_| unreachable!());
        let other: SessionKey = "telegram:42".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(
            TokenScope::ALL.map(|s| admin.has(s)),
            [true, true, true, true]
        );
        assert_eq!(
            TokenScope::ALL.map(|s| chat.has(s)),
            [true, false, false, false]
        );
        assert_eq!((chat.owns(&own), chat.owns(&other)), (true, false));
        assert_eq!((chat.may_read(&own), chat.may_read(&other)), (true, false));
        assert!(admin.owns(&other));
        assert_eq!(chat.default_session().as_str(), "token-ide:default");
        assert_eq!(admin.default_session().as_str(), "gateway:default");
        assert_eq!(namespace("tailscale", "a@b.c"), "tailscale-a-b-c");
    }
}
