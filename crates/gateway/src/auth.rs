//! Who may use the gateway: a bearer token (header, or `?token=` where a
//! browser cannot set headers), compared in constant time; optionally a
//! Tailscale identity from Tailscale Serve on loopback; the page's origin
//! on WebSocket upgrades; and a per-client request rate.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::server::State as Gateway;

/// The authenticated client of a request, put in the request's
/// extensions (RPC methods read it from theirs).
#[derive(Debug, Clone)]
pub struct Client {
    /// `token`, or `tailscale:<login>`.
    pub principal: String,
    pub peer: SocketAddr,
}

impl Client {
    /// The key the rate limit counts by.
    pub(crate) fn rate_key(&self) -> String {
        format!("{}@{}", self.principal, self.peer.ip())
    }
}

/// Compares a presented token with the real one in time that does not
/// depend on where they differ (or on their lengths).
pub(crate) fn token_matches(presented: &str, expected: &[u8; 32]) -> bool {
    let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    presented.ct_eq(expected).into()
}

pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The token a request presents: `Authorization: Bearer`, else `?token=`.
fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION)
        && let Ok(value) = value.to_str()
    {
        let mut parts = value.splitn(2, ' ');
        if parts
            .next()
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer"))
        {
            return parts.next().map(|t| t.trim().to_owned());
        }
    }
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "token").then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
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

/// Whether a WebSocket upgrade's `Origin` may open a connection: no
/// origin (not a browser), the gateway's own address, or one listed in
/// `gateway.allowed_origins`.
fn origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
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
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
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

/// The middleware in front of every route but `/healthz` and the
/// webhooks (which are signed instead).
pub(crate) async fn authorize(
    State(gateway): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let mut principal = None;
    if let Some(token) = presented_token(headers, request.uri().query()) {
        if token_matches(&token, &gateway.token_digest) {
            principal = Some("token".to_owned());
        } else {
            gateway.metrics.auth_failure();
            tracing::warn!(%peer, path = %request.uri().path(), "refused a request with a wrong token");
            return refusal(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the gateway token is wrong",
            );
        }
    } else if !gateway.settings.tailscale_users.is_empty() && peer.ip().is_loopback() {
        // Tailscale Serve proxies from loopback and sets these headers.
        if let Some(login) = headers
            .get("tailscale-user-login")
            .and_then(|v| v.to_str().ok())
            && gateway
                .settings
                .tailscale_users
                .iter()
                .any(|user| user.eq_ignore_ascii_case(login))
        {
            principal = Some(format!("tailscale:{login}"));
        }
    }
    let Some(principal) = principal else {
        gateway.metrics.auth_failure();
        return refusal(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a gateway token is required: send `Authorization: Bearer <token>` (or `?token=<token>` from a browser); the daemon's token is in FLYNN_HOME/gateway.token unless gateway.token or FLYNN_GATEWAY_TOKEN sets it",
        );
    };
    if is_upgrade(headers) && !origin_allowed(headers, &gateway.settings.allowed_origins) {
        gateway.metrics.auth_failure();
        tracing::warn!(%peer, "refused a WebSocket from another origin");
        return refusal(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "this page's origin may not open the gateway's WebSocket (add it to gateway.allowed_origins)",
        );
    }
    let client = Client { principal, peer };
    // RPC calls are counted one by one by the RPC layer; other requests here.
    if request.uri().path() != "/rpc"
        && let Err(wait) = gateway.limiter.check(&client.rate_key())
    {
        return rate_limited(wait);
    }
    request.extensions_mut().insert(client);
    next.run(request).await
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
    fn the_token_comes_from_the_header_or_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            presented_token(&headers, Some("a=1&token=x%2By")),
            Some("x+y".into())
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(
            presented_token(&headers, Some("token=other")),
            Some("abc".into())
        );
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_token(&headers, None), None);
    }

    #[test]
    fn origins_are_the_gateways_own_or_listed() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:18800"));
        assert!(origin_allowed(&headers, &[]), "no origin: not a browser");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:18800"),
        );
        assert!(origin_allowed(&headers, &[]));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!origin_allowed(&headers, &[]));
        assert!(origin_allowed(
            &headers,
            &["https://evil.example/".to_owned()]
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
