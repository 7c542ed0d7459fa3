//! A strict fake of Google's OAuth endpoints and of the Gmail, Calendar,
//! Drive, Docs and Tasks REST APIs, all on one server so that a client can
//! map every Google host onto [`FakeGoogle::base_url`]. Each endpoint is at
//! its real path:
//!
//! - OAuth for installed apps and limited-input devices
//!   (`accounts.google.com`, `oauth2.googleapis.com`,
//!   `openidconnect.googleapis.com`): `GET /o/oauth2/v2/auth`,
//!   `POST /token`, `POST /device/code`, `POST /revoke`, `GET /v1/userinfo`
//!   (also at `www.googleapis.com`'s `/oauth2/v3/userinfo`; see [`oauth`]);
//! - Gmail `/gmail/v1/users/me/…` (see [`gmail`]), Calendar
//!   `/calendar/v3/…` (see [`calendar`]), Drive `/drive/v3/…` and
//!   `/upload/drive/v3/files` (see [`drive`]), Docs `/v1/documents…` (see
//!   [`docs`]) and Tasks `/tasks/v1/…` (see [`tasks`]).
//!
//! Strict as Google: only [`CLIENT_ID`] with [`CLIENT_SECRET`] is accepted,
//! PKCE must be S256, every API call needs a live bearer token with a
//! scope the method documents, and errors have Google's JSON shape
//! (`{"error":{"code","message","errors":[{"message","domain","reason"}],
//! "status"}}`, OAuth's `{"error","error_description"}`). A request off
//! the documented format is refused the way Google refuses it and listed
//! in [`FakeGoogle::violations`]; what a well-behaved client can meet
//! (expired or revoked tokens, a missing scope, rate limits, pending
//! device codes, a refused consent) is answered the same way but is not a
//! violation. Anything the fake does not serve is a 404 and a violation.
//!
//! The accounts' data (mail, events, files, documents, tasks) lives in
//! memory; the control methods add to it and read it back.
//!
//! ```no_run
//! use flynn_testkit::google::{FakeGoogle, Mail, OWNER};
//!
//! let google = FakeGoogle::start();
//! let id = google.add_mail(OWNER, Mail { subject: "Hi".into(), ..Mail::default() });
//! let tokens = google.issue_tokens(OWNER, &["gmail.modify"]);
//! // ... point the client at google.base_url() with tokens.access_token,
//! // let it read message `id` and reply ...
//! assert_eq!(google.violations(), Vec::<String>::new());
//! assert_eq!(google.sent(OWNER)[0].subject, "Re: Hi");
//! # let _ = (id, tokens);
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::server::{self, Received, Server};

pub mod calendar;
pub mod docs;
pub mod drive;
pub mod gmail;
mod mime;
pub mod oauth;
pub mod tasks;

pub use gmail::{Attachment, Mail, SentMail};

/// The one OAuth client the fake accepts (a "Desktop app" client).
pub const CLIENT_ID: &str = "1234567890-fakeflynn.apps.googleusercontent.com";
/// That client's secret.
pub const CLIENT_SECRET: &str = "GOCSPX-fake-flynn-client-secret";
/// The account [`FakeGoogle::start`] creates.
pub const OWNER: &str = "owner@example.com";

/// The scope URL prefix Google's scopes share.
pub(crate) const SCOPE_PREFIX: &str = "https://www.googleapis.com/auth/";

/// One request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoogleRequest {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query's pairs, decoded, in order.
    pub query: Vec<(String, String)>,
    /// The account the bearer token (or the OAuth grant) belongs to.
    pub account: Option<String>,
}

/// The tokens [`FakeGoogle::issue_tokens`] hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub access_token: String,
    pub refresh_token: String,
}

/// A fake of Google's OAuth and APIs on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeGoogle {
    state: Arc<Mutex<State>>,
    server: Server,
}

/// A request as the handlers read it.
pub(crate) struct Req {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: axum::body::Bytes,
}

impl Req {
    /// The first value of a query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every value of a repeatable query parameter.
    pub fn params(&self, name: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// `"METHOD /path"`, to start a violation's text.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// Who an API call is made as: the bearer token's account and scopes.
pub(crate) struct Caller {
    pub email: String,
    pub scopes: Vec<String>,
}

impl Caller {
    /// Whether the token has one of `scopes` (short names are expanded to
    /// `https://www.googleapis.com/auth/…`; full URLs are kept).
    pub fn has_any(&self, scopes: &[&str]) -> bool {
        scopes
            .iter()
            .any(|wanted| self.scopes.iter().any(|s| *s == expand_scope(wanted)))
    }

    /// A 403 `insufficientPermissions` unless the token has one of
    /// `scopes`; `service` names the API in the error's details.
    pub fn require(&self, scopes: &[&str], service: &str) -> Option<Response> {
        if self.has_any(scopes) {
            None
        } else {
            Some(insufficient_scope(service, scopes))
        }
    }
}

/// A scope as Google writes it in token answers: `email` and `profile`
/// become their `userinfo.*` URLs, other short names gain the prefix,
/// `openid` and URLs stay.
pub(crate) fn expand_scope(scope: &str) -> String {
    match scope {
        "openid" => "openid".to_owned(),
        "email" => format!("{SCOPE_PREFIX}userinfo.email"),
        "profile" => format!("{SCOPE_PREFIX}userinfo.profile"),
        s if s.starts_with("https://") => s.to_owned(),
        s => format!("{SCOPE_PREFIX}{s}"),
    }
}

#[derive(Debug)]
pub(crate) struct Account {
    pub sub: String,
    pub time_zone: String,
    pub mailbox: gmail::Mailbox,
    pub calendars: Vec<calendar::Calendar>,
    pub files: Vec<drive::DriveFile>,
    pub task_lists: Vec<tasks::TaskList>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub accounts: BTreeMap<String, Account>,
    pub oauth: oauth::OAuthState,
    pub rate_limit: Option<(u32, u64)>,
    pub requests: Vec<GoogleRequest>,
    pub violations: Vec<String>,
    counter: u64,
}

impl State {
    /// 1, 2, 3… across the fake's lifetime, for ids.
    pub fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Records a violation.
    pub fn violation(&mut self, req: &Req, problem: &str) {
        self.violations.push(format!("{}: {problem}", req.line()));
    }

    /// Records a violation and answers it with Google's error.
    pub fn refuse(&mut self, req: &Req, code: u16, reason: &str, message: &str) -> Response {
        self.violation(req, message);
        api_error(code, reason, message)
    }

    /// Google's error for a failed call; a violation is also recorded.
    pub fn finish(&mut self, req: &Req, answer: Answer) -> Response {
        match answer {
            Ok(response) => response,
            Err(Fail::Violation(code, reason, message)) => self.refuse(req, code, reason, &message),
            Err(Fail::Error(code, reason, message)) => api_error(code, reason, &message),
        }
    }

    pub fn account(&mut self, email: &str) -> &mut Account {
        if !self.accounts.contains_key(email) {
            let sub = format!("1{:020}", self.next());
            let account = Account {
                sub,
                time_zone: "UTC".to_owned(),
                mailbox: gmail::Mailbox::new(),
                calendars: vec![calendar::Calendar::primary(email)],
                files: Vec::new(),
                task_lists: Vec::new(),
            };
            self.accounts.insert(email.to_owned(), account);
            let list_id = format!("MDE{:010}TGlzdA", self.next());
            if let Some(account) = self.accounts.get_mut(email) {
                account
                    .task_lists
                    .push(tasks::TaskList::new(list_id, "My Tasks"));
            }
        }
        match self.accounts.get_mut(email) {
            Some(account) => account,
            None => unreachable!("the account was just added"),
        }
    }
}

impl FakeGoogle {
    /// A fake with one account, [`OWNER`].
    pub fn start() -> Self {
        let mut state = State {
            accounts: BTreeMap::new(),
            oauth: oauth::OAuthState::new(OWNER),
            rate_limit: None,
            requests: Vec::new(),
            violations: Vec::new(),
            counter: 0,
        };
        state.account(OWNER);
        let state = Arc::new(Mutex::new(state));
        let shared = Arc::clone(&state);
        let router = Router::new().fallback(move |request: Request| {
            let shared = Arc::clone(&shared);
            async move { answer(&shared, request).await }
        });
        FakeGoogle {
            state,
            server: Server::start_router("google", router),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `http://127.0.0.1:port`: every Google host maps onto it.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Adds a Google account (with its primary calendar and task list).
    pub fn add_account(&self, email: &str) {
        self.lock().account(email);
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<GoogleRequest> {
        self.lock().requests.clone()
    }

    /// Every protocol violation seen; empty when the client behaved.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// The next `n` API requests (not OAuth ones) get `429` with
    /// `Retry-After: retry_after_secs`.
    pub fn rate_limit(&self, n: u32, retry_after_secs: u64) {
        self.lock().rate_limit = Some((n, retry_after_secs));
    }
}

/// Google's API error: `{"error":{"code","message","errors":[…],"status"}}`.
pub(crate) fn api_error(code: u16, reason: &str, message: &str) -> Response {
    let status = match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ALREADY_EXISTS",
        412 => "FAILED_PRECONDITION",
        429 => "RESOURCE_EXHAUSTED",
        _ => "",
    };
    let mut error = json!({
        "code": code,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}],
    });
    if !status.is_empty() {
        error["status"] = json!(status);
    }
    server::json(code, &json!({ "error": error }))
}

fn unauthenticated(reason: &str, message: &str) -> Response {
    let body = json!({"error": {
        "code": 401,
        "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        "errors": [{
            "message": message,
            "domain": "global",
            "reason": reason,
            "location": "Authorization",
            "locationType": "header",
        }],
        "status": "UNAUTHENTICATED",
    }});
    server::respond(
        401,
        &[
            ("content-type", "application/json; charset=UTF-8"),
            (
                "www-authenticate",
                "Bearer realm=\"https://accounts.google.com/\", error=\"invalid_token\"",
            ),
        ],
        Body::from(body.to_string()),
    )
}

pub(crate) fn insufficient_scope(service: &str, scopes: &[&str]) -> Response {
    let body = json!({"error": {
        "code": 403,
        "message": "Request had insufficient authentication scopes.",
        "errors": [{
            "message": "Insufficient Permission",
            "domain": "global",
            "reason": "insufficientPermissions",
        }],
        "status": "PERMISSION_DENIED",
        "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT",
            "domain": "googleapis.com",
            "metadata": {"service": service, "method": "fake.google.api"},
        }],
    }});
    let wanted: Vec<String> = scopes.iter().map(|s| expand_scope(s)).collect();
    let challenge = format!(
        "Bearer realm=\"https://accounts.google.com/\", error=\"insufficient_scope\", scope=\"{}\"",
        wanted.join(" ")
    );
    server::respond(
        403,
        &[
            ("content-type", "application/json; charset=UTF-8"),
            ("www-authenticate", &challenge),
        ],
        Body::from(body.to_string()),
    )
}

fn rate_limited(retry_after: u64) -> Response {
    let body = json!({"error": {
        "code": 429,
        "message": "Rate Limit Exceeded",
        "errors": [{"message": "Rate Limit Exceeded", "domain": "usageLimits", "reason": "rateLimitExceeded"}],
        "status": "RESOURCE_EXHAUSTED",
    }});
    server::respond(
        429,
        &[
            ("content-type", "application/json; charset=UTF-8"),
            ("retry-after", &retry_after.to_string()),
        ],
        Body::from(body.to_string()),
    )
}

/// `%XX` escapes decoded (a path segment: `+` stays `+`).
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 3339 in UTC with milliseconds, as Google writes timestamps.
pub(crate) fn rfc3339(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Base64url with padding, as Gmail writes bodies.
pub(crate) fn b64url(data: &[u8]) -> String {
    URL_SAFE.encode(data)
}

/// Base64url with or without padding (also tolerating line breaks).
pub(crate) fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    let clean: String = text
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '=')
        .collect();
    URL_SAFE_NO_PAD.decode(clean).ok()
}

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The client broke the documented format: Google's error, and a
    /// violation.
    Violation(u16, &'static str, String),
    /// What a well-behaved client can meet: Google's error only.
    Error(u16, &'static str, String),
}

/// A handler's answer.
pub(crate) type Answer = Result<Response, Fail>;

/// A 400 `badRequest` violation.
pub(crate) fn bad(message: impl Into<String>) -> Fail {
    Fail::Violation(400, "badRequest", message.into())
}

/// A 400 `invalid` violation naming a parameter.
pub(crate) fn invalid(message: impl Into<String>) -> Fail {
    Fail::Violation(400, "invalid", message.into())
}

/// A 404 for a method the fake does not serve, and a violation.
pub(crate) fn unserved() -> Fail {
    Fail::Violation(
        404,
        "notFound",
        "Not Found: the fake serves no such method".to_owned(),
    )
}

/// A 404 `notFound` (not a violation: the thing may have been deleted).
pub(crate) fn not_found(message: impl Into<String>) -> Fail {
    Fail::Error(404, "notFound", message.into())
}

/// The body as a JSON object, sent as `application/json`.
pub(crate) fn json_body(req: &Req) -> Result<serde_json::Map<String, Value>, Fail> {
    let typed = req
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"));
    if !typed {
        return Err(bad("the JSON body is not sent as application/json"));
    }
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Fail::Violation(
            400,
            "parseError",
            "Invalid JSON payload received: the body is not a JSON object.".to_owned(),
        )),
    }
}

/// A numeric query parameter within `1..=max` (`default` when absent;
/// larger values are cut to `max`, as Google does).
pub(crate) fn size_param(req: &Req, name: &str, default: usize, max: usize) -> Result<usize, Fail> {
    match req.param(name) {
        None => Ok(default),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n.min(max)),
            _ => Err(invalid(format!(
                "Invalid value '{text}'. Values must be within the range: [1, {max}]: {name}"
            ))),
        },
    }
}

/// A page of `items` after the request's `pageToken` (an offset this fake
/// issued), and the next page's token.
pub(crate) fn page<T: Clone>(
    req: &Req,
    items: &[T],
    size: usize,
) -> Result<(Vec<T>, Option<String>), Fail> {
    let start = match req.param("pageToken") {
        None | Some("") => 0,
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= items.len())
            .ok_or_else(|| invalid(format!("Invalid pageToken: {token}")))?,
    };
    let end = (start + size.max(1)).min(items.len());
    let next = (end < items.len()).then(|| format!("page-{end}"));
    Ok((items[start..end].to_vec(), next))
}

async fn answer(shared: &Mutex<State>, request: Request) -> Response {
    let received = Received::read(request).await;
    let query = form_urlencoded::parse(received.query.as_bytes())
        .into_owned()
        .collect();
    let req = Req {
        method: received.method,
        path: received.path,
        query,
        headers: received.headers,
        body: received.bytes,
    };
    let mut st = shared.lock().unwrap_or_else(PoisonError::into_inner);
    st.requests.push(GoogleRequest {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.query.clone(),
        account: None,
    });
    route(&mut st, &req)
}

fn route(st: &mut State, req: &Req) -> Response {
    let segments: Vec<String> = req.path.split('/').skip(1).map(percent_decode).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("GET", ["o", "oauth2", "v2", "auth"]) => oauth::authorize(st, req),
        ("POST", ["token"]) => oauth::token(st, req),
        ("POST", ["device", "code"]) => oauth::device_code(st, req),
        ("POST", ["revoke"]) => oauth::revoke(st, req),
        ("GET", ["v1", "userinfo"] | ["oauth2", "v3", "userinfo"]) => match authenticate(st, req) {
            Ok(caller) => oauth::userinfo(st, &caller),
            Err(response) => *response,
        },
        (_, ["gmail", "v1", rest @ ..]) => api(st, req, rest, gmail::route),
        (_, ["calendar", "v3", rest @ ..]) => api(st, req, rest, calendar::route),
        (_, ["drive", "v3", rest @ ..]) => api(st, req, rest, drive::route),
        (_, ["upload", "drive", "v3", rest @ ..]) => api(st, req, rest, drive::upload),
        (_, ["v1", "documents", rest @ ..]) => api(st, req, rest, docs::route),
        (_, ["tasks", "v1", rest @ ..]) => api(st, req, rest, tasks::route),
        _ => not_served(st, req),
    }
}

/// A 404 for a path or method the fake does not serve, and a violation.
pub(crate) fn not_served(st: &mut State, req: &Req) -> Response {
    st.refuse(
        req,
        404,
        "notFound",
        "Not Found: the fake serves no such method",
    )
}

type ApiHandler = fn(&mut State, &Req, &Caller, &[&str]) -> Answer;

fn api(st: &mut State, req: &Req, rest: &[&str], handler: ApiHandler) -> Response {
    if let Some((left, retry_after)) = st.rate_limit {
        st.rate_limit = (left > 1).then(|| (left - 1, retry_after));
        if left > 0 {
            return rate_limited(retry_after);
        }
    }
    match authenticate(st, req) {
        Ok(caller) => {
            let answer = handler(st, req, &caller, rest);
            st.finish(req, answer)
        }
        Err(response) => *response,
    }
}

/// The caller behind the request's bearer token, or Google's 401.
fn authenticate(st: &mut State, req: &Req) -> Result<Caller, Box<Response>> {
    let Some(header) = req.header("authorization") else {
        st.violation(req, "no Authorization header");
        return Err(Box::new(unauthenticated("required", "Login Required.")));
    };
    let Some(token) = header.strip_prefix("Bearer ") else {
        st.violation(req, "the Authorization header is not `Bearer <token>`");
        return Err(Box::new(unauthenticated(
            "authError",
            "Invalid Credentials",
        )));
    };
    match st.oauth.access_token(token) {
        Some((email, scopes)) => {
            if let Some(last) = st.requests.last_mut() {
                last.account = Some(email.clone());
            }
            Ok(Caller { email, scopes })
        }
        None => Err(Box::new(unauthenticated(
            "authError",
            "Invalid Credentials",
        ))),
    }
}

/// A `200` answer with a JSON body.
pub(crate) fn ok(value: &Value) -> Response {
    server::json(200, value)
}

/// The time now, for the resources' timestamps.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now()
}

/// Parses an RFC 3339 timestamp that carries an offset.
pub(crate) fn parse_rfc3339(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Device polls are timed on the monotonic clock.
pub(crate) fn instant() -> Instant {
    Instant::now()
}

#[cfg(test)]
pub(crate) mod testing {
    //! What the tests of every API share.

    use serde_json::Value;

    use super::FakeGoogle;

    pub fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    /// A call with a bearer token and an optional JSON body; the status
    /// and the body as JSON (`Null` when not JSON).
    pub async fn call(
        fake: &FakeGoogle,
        method: &str,
        token: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = client()
            .request(method, format!("{}{path}", fake.base_url()))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(fake: &FakeGoogle, token: &str, path: &str) -> (u16, Value) {
        call(fake, "GET", token, path, None).await
    }

    /// A form post to an OAuth endpoint.
    pub async fn form(fake: &FakeGoogle, path: &str, fields: &[(&str, &str)]) -> (u16, Value) {
        let response = client()
            .post(format!("{}{path}", fake.base_url()))
            .form(fields)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::get;
    use super::*;

    #[tokio::test]
    async fn requests_are_recorded_and_unknown_methods_are_violations() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["gmail.readonly"]).access_token;
        let (status, _) = get(
            &fake,
            &token,
            "/gmail/v1/users/me/messages?q=from%3Aada&labelIds=INBOX&labelIds=UNREAD",
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            fake.requests(),
            vec![GoogleRequest {
                method: "GET".to_owned(),
                path: "/gmail/v1/users/me/messages".to_owned(),
                query: vec![
                    ("q".to_owned(), "from:ada".to_owned()),
                    ("labelIds".to_owned(), "INBOX".to_owned()),
                    ("labelIds".to_owned(), "UNREAD".to_owned()),
                ],
                account: Some(OWNER.to_owned()),
            }]
        );
        assert_eq!(fake.violations(), Vec::<String>::new());

        let (status, error) = get(&fake, &token, "/gmail/v1/users/me/threads").await;
        assert_eq!(status, 404);
        assert_eq!(error["error"]["status"], "NOT_FOUND");
        let (status, _) = get(&fake, &token, "/youtube/v3/videos").await;
        assert_eq!(status, 404);
        assert_eq!(
            fake.violations(),
            vec![
                "GET /gmail/v1/users/me/threads: Not Found: the fake serves no such method"
                    .to_owned(),
                "GET /youtube/v3/videos: Not Found: the fake serves no such method".to_owned(),
            ]
        );
    }

    #[test]
    fn scopes_are_written_as_google_writes_them() {
        assert_eq!(
            expand_scope("email"),
            "https://www.googleapis.com/auth/userinfo.email"
        );
        assert_eq!(
            expand_scope("gmail.send"),
            "https://www.googleapis.com/auth/gmail.send"
        );
        assert_eq!(
            expand_scope("https://mail.google.com/"),
            "https://mail.google.com/"
        );
        assert_eq!(expand_scope("openid"), "openid");
        assert_eq!(percent_decode("owner%40example.com"), "owner@example.com");
        assert_eq!(percent_decode("a+b%2"), "a+b%2");
    }
}
