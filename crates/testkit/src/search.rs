//! Strict fakes of the web search engines `web.search` speaks to: Brave's
//! Web Search API, a SearXNG instance's JSON format, Tavily's search API,
//! and DuckDuckGo's HTML results page.
//!
//! Each serves the hits set with `set_hits`, records every request, and
//! answers a bad request the way the real service does (Brave's 422
//! `ErrorResponse`, Tavily's 401 `{"detail":{"error"}}`, SearXNG's 400
//! `{"error":"No query"}` or its HTML page when `format=json` is missing),
//! listing the client's mistake in `violations()`. A wrong key is answered
//! like the service does but is not a violation: the client followed the
//! protocol.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{self, Server};

/// One result a search fake serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    /// Brave's `description`, SearXNG's and Tavily's `content`,
    /// DuckDuckGo's `.result__snippet`.
    pub snippet: String,
}

impl SearchHit {
    pub fn new(
        title: impl Into<String>,
        url: impl Into<String>,
        snippet: impl Into<String>,
    ) -> Self {
        SearchHit {
            title: title.into(),
            url: url.into(),
            snippet: snippet.into(),
        }
    }
}

/// One request a search fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string's parameters, decoded, in order.
    pub query: Vec<(String, String)>,
    /// Every header, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as received (lossily UTF-8).
    pub body: String,
}

impl SearchRequest {
    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        first(&self.headers, name)
    }

    /// The first value of a query-string parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        first(&self.query, name)
    }

    /// The body's `application/x-www-form-urlencoded` fields, decoded.
    pub fn form(&self) -> Vec<(String, String)> {
        decode_form(&self.body)
    }

    /// The body as JSON, `Value::Null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

fn first<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

#[derive(Debug, Default)]
struct State {
    hits: Vec<SearchHit>,
    errors: VecDeque<(u16, String)>,
    requests: Vec<SearchRequest>,
    violations: Vec<String>,
}

/// What a search fake shares with its server thread.
#[derive(Debug, Default)]
struct Core {
    state: Mutex<State>,
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn violation(&self, message: impl Into<String>) {
        self.lock().violations.push(message.into());
    }

    fn hits(&self) -> Vec<SearchHit> {
        self.lock().hits.clone()
    }

    /// The scripted error for this request, if one is queued.
    fn scripted_error(&self) -> Option<Response> {
        let (status, body) = self.lock().errors.pop_front()?;
        let kind = if serde_json::from_str::<Value>(&body).is_ok() {
            "application/json"
        } else {
            "text/html; charset=utf-8"
        };
        Some(server::respond(
            status,
            &[("content-type", kind)],
            Body::from(body),
        ))
    }
}

type Answer = fn(&Core, Option<&str>, &SearchRequest) -> Response;

fn start(name: &str, key: Option<String>, answer: Answer) -> (Arc<Core>, Server) {
    let core = Arc::new(Core::default());
    let for_router = Arc::clone(&core);
    let router = Router::new().fallback(move |request: Request| {
        let core = Arc::clone(&for_router);
        let key = key.clone();
        async move {
            let captured = capture(request).await;
            core.lock().requests.push(captured.clone());
            answer(&core, key.as_deref(), &captured)
        }
    });
    (core, Server::start_router(name, router))
}

async fn capture(request: Request) -> SearchRequest {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1024 * 1024)
        .await
        .unwrap_or_default();
    SearchRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(decode_form).unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The methods every search fake shares; expands inside `impl FakeX` for a
/// struct with fields `core: Arc<Core>` and `server: Server`.
macro_rules! search_fake_methods {
    () => {
        /// The address the fake listens on.
        pub fn addr(&self) -> SocketAddr {
            self.server.addr()
        }

        /// The base URL to configure as `tools.web_search.endpoint`.
        pub fn base_url(&self) -> String {
            format!("http://{}", self.server.addr())
        }

        /// The results every later search is answered with (the first
        /// `count` of them where the engine takes a count).
        pub fn set_hits(&self, hits: Vec<SearchHit>) {
            self.core.lock().hits = hits;
        }

        /// Answers the next request with this status and body, verbatim.
        pub fn push_error(&self, status: u16, body: impl Into<String>) {
            self.core.lock().errors.push_back((status, body.into()));
        }

        /// Every request received, in order.
        pub fn requests(&self) -> Vec<SearchRequest> {
            self.core.lock().requests.clone()
        }

        /// Every protocol violation seen; empty when the client behaved.
        pub fn violations(&self) -> Vec<String> {
            self.core.lock().violations.clone()
        }
    };
}

/// A fake of Brave's Web Search API:
/// `GET /res/v1/web/search?q=..&count=..` with `X-Subscription-Token`.
#[derive(Debug)]
pub struct FakeBrave {
    core: Arc<Core>,
    server: Server,
}

impl FakeBrave {
    search_fake_methods!();

    /// Starts a fake that accepts only `key` as the subscription token.
    pub async fn start(key: impl Into<String>) -> Self {
        let (core, server) = start("brave", Some(key.into()), brave);
        FakeBrave { core, server }
    }
}

/// Brave's documented error body.
fn brave_error(status: u16, code: &str, detail: &str, meta: Value) -> Response {
    server::json(
        status,
        &json!({
            "type": "ErrorResponse",
            "error": {"id": "00000000-0000-4000-8000-000000000000", "status": status,
                "code": code, "detail": detail, "meta": meta},
            "time": 1_700_000_000
        }),
    )
}

fn brave_validation(loc: [&str; 2], message: &str) -> Response {
    brave_error(
        422,
        "VALIDATION",
        "Unable to validate request parameter(s)",
        json!({"errors": [{"type": "missing", "loc": loc, "msg": message}]}),
    )
}

fn brave(core: &Core, key: Option<&str>, request: &SearchRequest) -> Response {
    if request.path != "/res/v1/web/search" {
        core.violation(format!(
            "unexpected path {} (Brave serves GET /res/v1/web/search)",
            request.path
        ));
        return brave_error(404, "RESOURCE_NOT_FOUND", "Resource not found.", json!({}));
    }
    if request.method != "GET" {
        core.violation(format!(
            "{} /res/v1/web/search (the web search endpoint is GET)",
            request.method
        ));
        return brave_error(405, "METHOD_NOT_ALLOWED", "Method not allowed.", json!({}));
    }
    match request.header("x-subscription-token") {
        None => {
            core.violation("the X-Subscription-Token header is missing");
            return brave_validation(["header", "x-subscription-token"], "Field required");
        }
        Some(token) if Some(token) != key => {
            return brave_error(
                422,
                "SUBSCRIPTION_TOKEN_INVALID",
                "The provided subscription token is invalid.",
                json!({"component": "authentication"}),
            );
        }
        Some(_) => {}
    }
    let Some(query) = request.param("q").filter(|q| !q.trim().is_empty()) else {
        core.violation("the q parameter is missing or empty");
        return brave_validation(["query", "q"], "Field required");
    };
    let count = match request.param("count").map(str::parse::<usize>) {
        None => 20,
        Some(Ok(count)) if (1..=20).contains(&count) => count,
        Some(_) => {
            core.violation(format!(
                "count must be an integer from 1 to 20, got {:?}",
                request.param("count")
            ));
            return brave_validation(
                ["query", "count"],
                "Input should be less than or equal to 20",
            );
        }
    };
    if let Some(error) = core.scripted_error() {
        return error;
    }
    let results: Vec<Value> = core
        .hits()
        .into_iter()
        .take(count)
        .map(|hit| {
            json!({"type": "search_result", "title": hit.title, "url": hit.url,
                "description": hit.snippet, "is_source_local": false, "language": "en"})
        })
        .collect();
    server::json(
        200,
        &json!({
            "type": "search",
            "query": {"original": query, "more_results_available": false},
            "mixed": {"type": "mixed", "main": [], "top": [], "side": []},
            "web": {"type": "search", "results": results, "family_friendly": true}
        }),
    )
}

/// A fake SearXNG instance: `GET /search?q=..&format=json`.
#[derive(Debug)]
pub struct FakeSearxng {
    core: Arc<Core>,
    server: Server,
}

impl FakeSearxng {
    search_fake_methods!();

    /// Starts an instance with the JSON format enabled.
    pub async fn start() -> Self {
        let (core, server) = start("searxng", None, searxng);
        FakeSearxng { core, server }
    }

    /// Starts an instance whose `search.formats` lacks `json`, so a JSON
    /// search is answered 403 (SearXNG's default settings).
    pub async fn start_without_json() -> Self {
        let (core, server) = start("searxng", None, searxng_html_only);
        FakeSearxng { core, server }
    }
}

fn searxng_html_only(core: &Core, _key: Option<&str>, request: &SearchRequest) -> Response {
    if request.path == "/search" && request.param("format") == Some("json") {
        return server::respond(
            403,
            &[("content-type", "text/html; charset=utf-8")],
            Body::from("<!doctype html><title>403 Forbidden</title><h1>Forbidden</h1>"),
        );
    }
    searxng(core, None, request)
}

fn searxng(core: &Core, _key: Option<&str>, request: &SearchRequest) -> Response {
    if request.path != "/search" || !matches!(request.method.as_str(), "GET" | "POST") {
        core.violation(format!(
            "unexpected request {} {} (SearXNG serves GET /search)",
            request.method, request.path
        ));
        return server::respond(
            404,
            &[("content-type", "text/html; charset=utf-8")],
            Body::from("<!doctype html><title>404 Not Found</title>"),
        );
    }
    if request.param("format") != Some("json") {
        core.violation("format=json is missing: SearXNG answers with its HTML page");
        return server::respond(
            200,
            &[("content-type", "text/html; charset=utf-8")],
            Body::from(
                "<!doctype html><html><head><title>SearXNG</title></head><body></body></html>",
            ),
        );
    }
    let Some(query) = request.param("q").filter(|q| !q.is_empty()) else {
        core.violation("the q parameter is missing or empty");
        return server::json(400, &json!({"error": "No query"}));
    };
    if let Some(error) = core.scripted_error() {
        return error;
    }
    let results: Vec<Value> = core
        .hits()
        .into_iter()
        .enumerate()
        .map(|(i, hit)| {
            json!({"url": hit.url, "title": hit.title, "content": hit.snippet,
                "engine": "duckduckgo", "engines": ["duckduckgo"], "positions": [i + 1],
                "score": 1.0, "category": "general", "template": "default.html"})
        })
        .collect();
    server::json(
        200,
        &json!({
            "query": query, "number_of_results": 0, "results": results, "answers": [],
            "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []
        }),
    )
}

/// A fake of Tavily's search API: `POST /search` with
/// `Authorization: Bearer <key>` and a JSON body `{query, max_results}`.
#[derive(Debug)]
pub struct FakeTavily {
    core: Arc<Core>,
    server: Server,
}

impl FakeTavily {
    search_fake_methods!();

    /// Starts a fake that accepts only `key`.
    pub async fn start(key: impl Into<String>) -> Self {
        let (core, server) = start("tavily", Some(key.into()), tavily);
        FakeTavily { core, server }
    }
}

fn tavily_error(status: u16, message: &str) -> Response {
    server::json(status, &json!({"detail": {"error": message}}))
}

fn tavily(core: &Core, key: Option<&str>, request: &SearchRequest) -> Response {
    if request.path != "/search" {
        core.violation(format!(
            "unexpected path {} (Tavily serves POST /search)",
            request.path
        ));
        return server::json(404, &json!({"detail": "Not Found"}));
    }
    if request.method != "POST" {
        core.violation(format!(
            "{} /search (Tavily's search is POST)",
            request.method
        ));
        return server::json(405, &json!({"detail": "Method Not Allowed"}));
    }
    let unauthorized = || tavily_error(401, "Unauthorized: missing or invalid API key.");
    match request
        .header("authorization")
        .map(|v| v.strip_prefix("Bearer "))
    {
        None | Some(None) => {
            core.violation(format!(
                "the Authorization header is {} (expected 'Bearer <key>')",
                request
                    .header("authorization")
                    .map_or_else(|| "missing".to_owned(), |v| format!("malformed: '{v}'"))
            ));
            return unauthorized();
        }
        Some(Some(token)) if Some(token) != key => return unauthorized(),
        Some(Some(_)) => {}
    }
    if !request
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        core.violation("the Content-Type is not application/json");
    }
    let body = request.json();
    let Some(query) = body
        .get("query")
        .and_then(Value::as_str)
        .filter(|q| !q.trim().is_empty())
    else {
        core.violation("the body has no 'query' string");
        return tavily_error(400, "Query is missing.");
    };
    let count = match body.get("max_results") {
        None => 5,
        Some(n) => match n.as_u64() {
            Some(n) if n <= 20 => usize::try_from(n).unwrap_or(20),
            _ => {
                core.violation(format!(
                    "max_results must be an integer from 0 to 20, got {n}"
                ));
                return tavily_error(400, "max_results must be between 0 and 20.");
            }
        },
    };
    if let Some(error) = core.scripted_error() {
        return error;
    }
    let results: Vec<Value> = core
        .hits()
        .into_iter()
        .take(count)
        .map(|hit| {
            json!({"title": hit.title, "url": hit.url, "content": hit.snippet,
                "score": 0.8, "raw_content": null})
        })
        .collect();
    server::json(
        200,
        &json!({
            "query": query, "follow_up_questions": null, "answer": null, "images": [],
            "results": results, "response_time": 0.42,
            "request_id": "123e4567-e89b-12d3-a456-426614174111"
        }),
    )
}

/// A fake of DuckDuckGo's HTML results page: `POST /html/` with the form
/// field `q`. Results link through `//duckduckgo.com/l/?uddg=<url>`, and an
/// ad comes first, as on the real page.
#[derive(Debug)]
pub struct FakeDuckDuckGo {
    core: Arc<Core>,
    server: Server,
}

impl FakeDuckDuckGo {
    search_fake_methods!();

    pub async fn start() -> Self {
        let (core, server) = start("duckduckgo", None, duckduckgo);
        FakeDuckDuckGo { core, server }
    }
}

fn html(status: u16, page: String) -> Response {
    server::respond(
        status,
        &[("content-type", "text/html; charset=UTF-8")],
        Body::from(page),
    )
}

fn duckduckgo(core: &Core, _key: Option<&str>, request: &SearchRequest) -> Response {
    if request.path != "/html/" {
        core.violation(format!(
            "unexpected path {} (the HTML results page is /html/)",
            request.path
        ));
        return html(404, "<!DOCTYPE html><title>404</title>".to_owned());
    }
    if request.method != "POST" {
        core.violation(format!(
            "{} /html/ (the form posts the query: POST with q in the body)",
            request.method
        ));
    }
    if request.method == "POST"
        && !request
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"))
    {
        core.violation("the body is not application/x-www-form-urlencoded");
    }
    let form = request.form();
    let Some(query) = first(&form, "q").filter(|q| !q.trim().is_empty()) else {
        core.violation("the form field q is missing or empty");
        // Without a query DuckDuckGo shows its search form, no results.
        return html(
            200,
            "<!DOCTYPE html><html><head><title>DuckDuckGo</title></head><body>\
             <form action=\"/html/\" method=\"post\"><input name=\"q\" type=\"text\"></form>\
             </body></html>"
                .to_owned(),
        );
    };
    if let Some(error) = core.scripted_error() {
        return error;
    }
    let mut page = format!(
        "<!DOCTYPE html><html><head><title>{} at DuckDuckGo</title></head><body>\
         <div class=\"serp__results\"><div id=\"links\" class=\"results\">\
         <div class=\"result results_links results_links_deep result--ad\">\
         <div class=\"links_main links_deep result__body\"><h2 class=\"result__title\">\
         <a rel=\"nofollow\" class=\"result__a\" href=\"https://duckduckgo.com/y.js?ad_domain=ads.example\">\
         Sponsored: buy now</a></h2><a class=\"result__snippet\" href=\"https://duckduckgo.com/y.js\">\
         An ad.</a></div></div>",
        escape(query)
    );
    for hit in core.hits() {
        let link = format!(
            "//duckduckgo.com/l/?uddg={}&amp;rut=0123abcd",
            percent_encode(&hit.url)
        );
        page.push_str(&format!(
            "<div class=\"result results_links results_links_deep web-result\">\
             <div class=\"links_main links_deep result__body\">\
             <h2 class=\"result__title\"><a rel=\"nofollow\" class=\"result__a\" href=\"{link}\">{}</a></h2>\
             <div class=\"result__extras\"><div class=\"result__extras__url\">\
             <a class=\"result__url\" href=\"{link}\">{}</a></div></div>\
             <a class=\"result__snippet\" href=\"{link}\">{}</a>\
             <div class=\"clear\"></div></div></div>",
            escape(&hit.title),
            escape(&hit.url),
            escape(&hit.snippet)
        ));
    }
    if core.hits().is_empty() {
        page.push_str("<div class=\"no-results\">No results.</div>");
    }
    page.push_str("</div></div></body></html>");
    html(200, page)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Percent-encodes everything but the unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `application/x-www-form-urlencoded` text (also query strings).
fn decode_form(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding_round_trips() {
        assert_eq!(
            decode_form("q=rust+lang%3F&count=5&flag"),
            vec![
                ("q".to_owned(), "rust lang?".to_owned()),
                ("count".to_owned(), "5".to_owned()),
                ("flag".to_owned(), String::new()),
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
        let url = "https://example.com/a b?c=d&é";
        assert_eq!(percent_decode(&percent_encode(url)), url);
    }
}
