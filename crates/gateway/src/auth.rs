//! Who may use the gateway: a bearer token (the `Authorization` header;
//! `?token=` only on the WebSocket upgrade, where a browser cannot set
//! headers), compared in constant time, each token with its scopes; on the
//! Tailscale listener only, a Tailscale identity that tailscaled confirms;
//! the page's origin on WebSocket upgrades and state-changing requests;
//! the `Host` a request is for; failed attempts and the request rate per
//! client.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flynn_protocol::config::TokenScope;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::server::State as Gateway;

/// The authenticated client of a request, put in the request's
/// extensions (RPC methods read it from theirs).
#[derive(Debug, Clone)]
pub struct Client {
    /// `token:<name>`, or `tailscale:<login>`.
    pub principal: String,
    /// The token's name (`default` for the token of `gateway.token`,
    /// `FLYNN_GATEWAY_TOKEN` or the token file), or the Tailscale login.
    pub name: String,
    /// What it may do; `admin` implies every other scope.
    pub scopes: Vec<TokenScope>,
    /// The channel of the sessions it owns without `admin`:
    /// `token-<name>` (or `tailscale-<login>`).
    pub namespace: String,
    /// Where it connects from (for the Tailscale listener, the tailnet
    /// address tailscaled vouched for).
    pub peer: SocketAddr,
}

impl Client {
    pub(crate) fn token(name: &str, scopes: Vec<TokenScope>, peer: SocketAddr) -> Client {
        Client {
            principal: format!("token:{name}"),
            name: name.to_owned(),
            scopes,
            namespace: crate::scope::namespace("token", name),
            peer,
        }
    }

    pub(crate) fn tailscale(login: &str, scopes: Vec<TokenScope>, peer: SocketAddr) -> Client {
        Client {
            principal: format!("tailscale:{login}"),
            name: login.to_owned(),
            scopes,
            namespace: crate::scope::namespace("tailscale", login),
            peer,
        }
    }

    /// The key the rate limit counts by.
    pub(crate) fn rate_key(&self) -> String {
        format!("{}@{}", self.principal, self.peer.ip())
    }
}

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// `gateway.bind`.
    Main,
    /// `gateway.tailscale.listen`: only `tailscale serve` connects here.
    Tailscale,
}

/// A token the gateway accepts: its name, the SHA-256 of its value, and
/// its scopes.
#[derive(Clone)]
pub(crate) struct Accepted {
    pub name: String,
    pub digest: [u8; 32],
    pub scopes: Vec<TokenScope>,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
/// Compares a presented token with the real one in time that does not
/// depend on where they differ (or on their lengths).
pub(crate) fn token_matches(presented: &str, expected: &[u8; 32]) -> bool {
    let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    presented.ct_eq(expected).into()
}

pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The accepted token `presented` is, comparing with every one (in
/// constant time each, and always all of them).
pub(crate) fn find_token<'a>(presented: &str, accepted: &'a [Accepted]) -> Option<&'a Accepted> {
    let digest = digest(presented);
    let mut found = None;
    for entry in accepted {
        if bool::from(digest.ct_eq(&entry.digest)) && found.is_none() {
            found = Some(entry);
        }
    }
    found
}

/// The token of `Authorization: Bearer <token>`.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let mut parts = value.splitn(2, ' ');
    if parts
        .next()
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer"))
    {
        return parts.next().map(|t| t.trim().to_owned());
    }
    None
}

/// The token a request presents: `Authorization: Bearer`, else, on a
/// WebSocket upgrade only, `?token=`.
pub(crate) fn presented_token(
    headers: &HeaderMap,
    query: Option<&str>,
    upgrade: bool,
) -> Option<String> {
    if let Some(token) = bearer(headers) {
        return Some(token);
    }
    if !upgrade {
        return None;
    }
    query_token(query)
}

fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "token").then(|| percent_decode(value))
    })
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The host name of a `Host` value: `a.b:80` → `a.b`, `[::1]:80` → `::1`.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The page's origin a request carries, if it is one the gateway trusts:
/// no origin (not a browser), the gateway's own address (the `Host` it
/// was reached at), or one listed in `gateway.allowed_origins`.
pub(crate) fn origin_allowed(headers: &HeaderMap, allowed: &[String], via: Via) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return true;
    };
    let origin = origin.trim_end_matches('/');
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin))
    {
        return true;
    }
    // Behind `tailscale serve`, the name the page used is the forwarded one.
    let host = match via {
        Via::Tailscale => headers.get("x-forwarded-host"),
        Via::Main => headers.get(header::HOST),
    }
    .and_then(|h| h.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// Whether a state-changing request comes from a page of another site:
/// an `Origin` the gateway does not trust, or, without one,
/// `Sec-Fetch-Site: cross-site` or `same-site`.
fn cross_site(headers: &HeaderMap, allowed: &[String], via: Via) -> bool {
    if headers.contains_key(header::ORIGIN) {
        return !origin_allowed(headers, allowed, via);
    }
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| matches!(site, "cross-site" | "same-site"))
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// An error body for HTTP refusals: `{"error": {"code", "message"}}`.
pub(crate) fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": code, "message": message } });
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"flynn\""),
        );
    }
    response
}

/// The connection a request came on: put in its extensions by the
/// server for every connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conn {
    pub peer: SocketAddr,
    pub via: Via,
}

/// The address a request is counted under: the peer, or on the Tailscale
/// listener the client address `tailscale serve` reports.
pub(crate) fn client_ip(conn: &Conn, headers: &HeaderMap) -> IpAddr {
    if conn.via == Via::Tailscale
        && let Some(ip) = forwarded_for(headers)
    {
        return ip;
    }
    conn.peer.ip()
}

/// `X-Forwarded-For` as `tailscale serve` sets it: one address.
fn forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    headers
        .get("x-forwarded-for")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Refuses requests for a `Host` the gateway does not answer to (a DNS
/// rebinding page names its own), and, on the Tailscale listener, for any
/// name but the gateway's Tailscale name. IP literals are always fine: a
/// page at an address is that address's own.
pub(crate) async fn check_host(
    State(gateway): State<Arc<Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    let conn = request.extensions().get::<Conn>().copied();
    let path = request.uri().path();
    // Platform and webhook senders sign their requests; a proxy in front
    // may give them any public name.
    let signed = path.starts_with("/channels/") || path.starts_with("/webhooks/");
    let headers = request.headers();
    if conn.is_some_and(|c| c.via == Via::Tailscale) {
        let expected = gateway.settings.tailscale.host.as_deref().unwrap_or("");
        let host = headers
            .get("x-forwarded-host")
            .or_else(|| headers.get(header::HOST))
            .and_then(|h| h.to_str().ok())
            .map(host_name);
        if host.is_none_or(|h| !h.eq_ignore_ascii_case(expected)) {
            return refusal(
                StatusCode::MISDIRECTED_REQUEST,
                "wrong_host",
                "the Tailscale listener answers only for gateway.tailscale.host",
            );
        }
        return next.run(request).await;
    }
    if !signed && let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().map(host_name).unwrap_or("");
        if !host_allowed(host, &gateway) {
            tracing::warn!(host = %host, "refused a request for another host name");
            return refusal(
                StatusCode::MISDIRECTED_REQUEST,
                "wrong_host",
                "this gateway does not answer to that host name (add it to gateway.allowed_hosts if a proxy serves it)",
            );
        }
    }
    next.run(request).await
}

fn host_allowed(host: &str, gateway: &Gateway) -> bool {
    if host.parse::<IpAddr>().is_ok() {
        return true;
    }
    let host = host.trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    let bind = host_name(&gateway.settings.bind);
    let named = [bind]
        .into_iter()
        .chain(gateway.settings.tailscale.host.as_deref())
        .chain(gateway.settings.allowed_hosts.iter().map(|h| host_name(h)));
    named
        .into_iter()
        .any(|name| name.trim_end_matches('.').eq_ignore_ascii_case(host))
}

/// The message for a request without a token.
const TOKEN_NEEDED: &str = "a gateway token is required: send `Authorization: Bearer <token>` (a WebSocket from a browser may use `?token=<token>`); the daemon's token is in FLYNN_HOME/gateway.token unless gateway.token or FLYNN_GATEWAY_TOKEN sets it";

/// The middleware in front of every route but `/healthz` and the
/// webhooks (which are signed instead).
pub(crate) async fn authorize(
    State(gateway): State<Arc<Gateway>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(conn) = request.extensions().get::<Conn>().copied() else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the connection was not recorded",
        );
    };
    let headers = request.headers();
    let ip = client_ip(&conn, headers);
    if let Err(wait) = gateway.failures.peek(&ip.to_string()) {
        return rate_limited(wait);
    }
    let path = request.uri().path().to_owned();
    let Ok(needed) = crate::scope::of_route(&path) else {
        return refusal(StatusCode::NOT_FOUND, "not_found", "no such route");
    };
    let upgrade = is_upgrade(headers);
    let fail = |message: &str| {
        gateway.metrics.auth_failure();
        let _ = gateway.failures.check(&ip.to_string());
        refusal(StatusCode::UNAUTHORIZED, "unauthorized", message)
    };
    let client = if let Some(token) = presented_token(headers, request.uri().query(), upgrade) {
        match find_token(&token, &gateway.tokens) {
            Some(entry) => Client::token(
                &entry.name,
                entry.scopes.clone(),
                SocketAddr::new(ip, conn.peer.port()),
            ),
            None => {
                tracing::warn!(peer = %ip, path = %path, "refused a request with a wrong token");
                return fail("the gateway token is wrong");
            }
        }
    } else if let Some(login) = headers
        .get("tailscale-user-login")
        .and_then(|v| v.to_str().ok())
    {
        if conn.via != Via::Tailscale {
            tracing::warn!(peer = %ip, "refused a Tailscale identity header on the main listener");
            return fail(
                "Tailscale identity headers count only on gateway.tailscale.listen, where `tailscale serve` alone connects; send a token here",
            );
        }
        match crate::tailscale::verify(&gateway, login, headers).await {
            Ok(client) => client,
            Err(why) => {
                tracing::warn!(peer = %ip, login = %login, reason = %why, "refused a Tailscale identity");
                return fail(&format!("the Tailscale identity was not confirmed: {why}"));
            }
        }
    } else {
        if query_token(request.uri().query()).is_some() {
            return fail(
                "`?token=` is accepted only on the WebSocket upgrade: send `Authorization: Bearer <token>`",
            );
        }
        return fail(TOKEN_NEEDED);
    };
    if let Some(scope) = needed
        && !client.has(scope)
    {
        return refusal(
            StatusCode::FORBIDDEN,
            "forbidden_scope",
            &format!(
                "{path} needs a token with the `{scope}` scope; '{}' has {}",
                client.name,
                scope_list(&client.scopes)
            ),
        );
    }
    let state_changing = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if (upgrade || state_changing)
        && cross_site(headers, &gateway.settings.allowed_origins, conn.via)
    {
        gateway.metrics.auth_failure();
        tracing::warn!(peer = %ip, path = %path, "refused a request from another site's page");
        return refusal(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "a page of another site may not use the gateway (add its origin to gateway.allowed_origins)",
        );
    }
    // RPC calls are counted one by one by the RPC layer; other requests here.
    if path != "/rpc"
        && let Err(wait) = gateway.limiter.check(&client.rate_key())
    {
        return rate_limited(wait);
    }
    request.extensions_mut().insert(client);
    next.run(request).await
}

/// `chat, read`, for messages.
pub(crate) fn scope_list(scopes: &[TokenScope]) -> String {
    if scopes.is_empty() {
        return "no scope".to_owned();
    }
    scopes
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn rate_limited(wait: Duration) -> Response {
    let mut response = refusal(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "too many requests from this client; slow down",
    );
    let secs = wait.as_secs().max(1);
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// A token bucket per client: `per_minute` requests a minute, up to
/// `per_minute` at once.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept before idle ones are dropped.
const MAX_BUCKETS: usize = 10_000;

impl RateLimiter {
    pub(crate) fn new(per_minute: u32) -> Self {
        RateLimiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the client's bucket has a request left, without taking it.
    pub(crate) fn peek(&self, key: &str) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let rate = f64::from(self.per_minute) / 60.0;
        let now = Instant::now();
        let buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(bucket) = buckets.get(key) else {
            return Ok(());
        };
        let tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate)
            .min(f64::from(self.per_minute));
        if tokens >= 1.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - tokens) / rate))
        }
    }

    /// Takes one request from the client's bucket, or says how long to
    /// wait for the next.
    pub(crate) fn check(&self, key: &str) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let capacity = f64::from(self.per_minute);
        let rate = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(key) {
            buckets.retain(|_, b| now.duration_since(b.at) < Duration::from_secs(60));
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_content() {
        let expected = digest("s3cret");
        assert!(token_matches("s3cret", &expected));
        assert!(!token_matches("s3cre", &expected));
        assert!(!token_matches("s3cret ", &expected));
        assert!(!token_matches("", &expected));
    }

    #[test]
    fn the_token_comes_from_the_header_or_on_an_upgrade_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            presented_token(&headers, Some("a=1&token=x%2By"), true),
            Some("x+y".into())
        );
        assert_eq!(
            presented_token(&headers, Some("a=1&token=x%2By"), false),
            None,
            "?token= only on a WebSocket upgrade"
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(
            presented_token(&headers, Some("token=other"), true),
            Some("abc".into())
        );
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_token(&headers, None, false), None);
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("a.b:80"), "a.b");
        assert_eq!(host_name("[::1]:18800"), "::1");
        assert_eq!(host_name("a.b"), "a.b");
    }

    #[test]
    fn origins_are_the_gateways_own_or_listed() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:18800"));
        assert!(
            origin_allowed(&headers, &[], Via::Main),
            "no origin: not a browser"
        );
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:18800"),
        );
        assert!(origin_allowed(&headers, &[], Via::Main));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!origin_allowed(&headers, &[], Via::Main));
        assert!(origin_allowed(
            &headers,
            &["https://evil.example/".to_owned()],
            Via::Main
        ));
    }

    #[test]
    fn the_rate_limit_refills_over_time() {
        let limiter = RateLimiter::new(2);
        assert!(limiter.check("a").is_ok());
        assert!(limiter.check("a").is_ok());
        let wait = limiter.check("a").err();
        assert!(wait.is_some_and(|w| w > Duration::from_secs(20)));
        assert!(limiter.check("b").is_ok(), "clients are counted apart");
        assert!(RateLimiter::new(0).check("a").is_ok(), "0 turns it off");
    }
}
