//! Google's OAuth 2.0 for installed apps (authorization code with PKCE on
//! a loopback redirect) and for limited-input devices, and OpenID
//! Connect's userinfo.
//!
//! - `GET /o/oauth2/v2/auth` acts as the consent screen: the user of
//!   [`FakeGoogle::consent_as`] clicks Allow (or refuses, after
//!   [`FakeGoogle::deny_consent`]) and the browser is sent (`302`) to the
//!   loopback `redirect_uri` with `state`, `code` and `scope`. A
//!   non-loopback `redirect_uri` gets Google's `redirect_uri_mismatch`
//!   error page. PKCE must be S256 and `state` present (both violations
//!   otherwise, though Google would proceed, and so does the fake).
//! - `POST /token` (form-encoded only): the `authorization_code`,
//!   `refresh_token` and device-code grants, with Google's errors and
//!   statuses (`invalid_grant` 400, `invalid_client` 401,
//!   `authorization_pending` 428, `slow_down` 403, `access_denied` 403,
//!   `expired_token` 400).
//! - `POST /device/code`: Google's device flow, which allows only a few
//!   scopes ([`DEVICE_SCOPES`]); any other is `400 invalid_scope`, as
//!   Google answers (not a violation).
//! - `POST /revoke`: either kind of token; revoking one revokes the grant
//!   (the refresh token and its access tokens).
//! - `GET /v1/userinfo`: `{sub, email, email_verified}` for a token with
//!   `openid` or `email`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    CLIENT_ID, CLIENT_SECRET, Caller, FakeGoogle, Req, State, Tokens, expand_scope, instant, now,
};
use crate::server;

/// The scopes Google allows in the device flow, as Google lists them.
pub const DEVICE_SCOPES: &[&str] = &[
    "openid",
    "email",
    "profile",
    "https://www.googleapis.com/auth/userinfo.email",
    "https://www.googleapis.com/auth/userinfo.profile",
    "https://www.googleapis.com/auth/drive.appdata",
    "https://www.googleapis.com/auth/drive.file",
    "https://www.googleapis.com/auth/youtube",
    "https://www.googleapis.com/auth/youtube.readonly",
];

/// Where Google sends the user of a device code.
pub const VERIFICATION_URL: &str = "https://www.google.com/device";

#[derive(Debug)]
struct Grant {
    email: String,
    scopes: Vec<String>,
    redirect_uri: String,
    challenge: Option<String>,
    /// `S256`, or `plain` (a violation, but Google takes it).
    plain: bool,
    offline: bool,
    used: bool,
}

#[derive(Debug)]
struct AccessToken {
    email: String,
    scopes: Vec<String>,
    expires: DateTime<Utc>,
    dead: bool,
    refresh: Option<String>,
}

#[derive(Debug)]
struct RefreshToken {
    email: String,
    scopes: Vec<String>,
    revoked: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Pending,
    Approved(String),
    Denied,
}

#[derive(Debug)]
struct Device {
    device_code: String,
    user_code: String,
    scopes: Vec<String>,
    expires: DateTime<Utc>,
    last_poll: Option<Instant>,
    decision: Decision,
    used: bool,
}

#[derive(Debug)]
pub(crate) struct OAuthState {
    consent_as: String,
    deny_next: bool,
    codes: HashMap<String, Grant>,
    access: HashMap<String, AccessToken>,
    refresh: HashMap<String, RefreshToken>,
    devices: Vec<Device>,
    device_interval: u64,
    lifetime: i64,
    revoked: Vec<String>,
    counter: u64,
}

impl OAuthState {
    pub fn new(owner: &str) -> Self {
        OAuthState {
            consent_as: owner.to_owned(),
            deny_next: false,
            codes: HashMap::new(),
            access: HashMap::new(),
            refresh: HashMap::new(),
            devices: Vec::new(),
            device_interval: 5,
            lifetime: 3599,
            revoked: Vec::new(),
            counter: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// The account and scopes of a live access token.
    pub fn access_token(&self, token: &str) -> Option<(String, Vec<String>)> {
        self.access
            .get(token)
            .filter(|t| !t.dead && t.expires > now())
            .map(|t| (t.email.clone(), t.scopes.clone()))
    }

    /// Issues an access token (and a refresh token when `offline`): the
    /// token endpoint's answer.
    fn issue(&mut self, email: &str, scopes: &[String], offline: bool, sub: &str) -> Value {
        let n = self.next();
        let refresh = offline.then(|| format!("1//0fake-refresh-{n}-{}", noise(n)));
        if let Some(refresh) = &refresh {
            self.refresh.insert(
                refresh.clone(),
                RefreshToken {
                    email: email.to_owned(),
                    scopes: scopes.to_vec(),
                    revoked: false,
                },
            );
        }
        let mut answer = self.access_for(email, scopes, refresh.clone(), sub);
        if let Some(refresh) = refresh {
            answer["refresh_token"] = json!(refresh);
        }
        answer
    }

    fn access_for(
        &mut self,
        email: &str,
        scopes: &[String],
        refresh: Option<String>,
        sub: &str,
    ) -> Value {
        let n = self.next();
        let token = format!("ya29.fake-access-{n}-{}", noise(n));
        self.access.insert(
            token.clone(),
            AccessToken {
                email: email.to_owned(),
                scopes: scopes.to_vec(),
                expires: now() + chrono::Duration::seconds(self.lifetime),
                dead: false,
                refresh,
            },
        );
        let mut answer = json!({
            "access_token": token,
            "expires_in": self.lifetime,
            "scope": scopes.join(" "),
            "token_type": "Bearer",
        });
        if scopes.iter().any(|s| s == "openid") {
            answer["id_token"] = json!(id_token(email, sub, self.lifetime));
        }
        answer
    }
}

/// A made-up but well-formed JWT with Google's claims (its signature is
/// not real).
fn id_token(email: &str, sub: &str, lifetime: i64) -> String {
    let issued = now().timestamp();
    let header = json!({"alg": "RS256", "kid": "fake-google-key", "typ": "JWT"});
    let claims = json!({
        "iss": "https://accounts.google.com",
        "azp": CLIENT_ID,
        "aud": CLIENT_ID,
        "sub": sub,
        "email": email,
        "email_verified": true,
        "iat": issued,
        "exp": issued + lifetime,
    });
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(b"fake-signature")
    )
}

/// A few characters that differ from one token to the next.
fn noise(n: u64) -> String {
    let digest = Sha256::digest(format!("flynn-fake-google-{n}"));
    URL_SAFE_NO_PAD.encode(&digest[..12])
}

/// A user code like `ABCD-EFGH`.
fn user_code(n: u64) -> String {
    const LETTERS: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";
    let digest = Sha256::digest(format!("user-code-{n}"));
    let letters: String = digest[..8]
        .iter()
        .map(|b| char::from(LETTERS[usize::from(*b) % LETTERS.len()]))
        .collect();
    format!("{}-{}", &letters[..4], &letters[4..])
}

fn oauth_error(status: u16, error: &str, description: &str) -> Response {
    server::json(
        status,
        &json!({"error": error, "error_description": description}),
    )
}

/// Google's error page for a bad authorization request.
fn error_page(status: u16, error: &str, detail: &str) -> Response {
    let page = format!(
        "<!DOCTYPE html><html><head><title>Error {status}: {error}</title></head>\
<body><h1>Access blocked: Flynn's request is invalid</h1>\
<p>Error {status}: {error}</p><p>{detail}</p></body></html>"
    );
    server::respond(
        status,
        &[("content-type", "text/html; charset=utf-8")],
        Body::from(page),
    )
}

/// Whether `uri` is a loopback redirect Google accepts from a desktop
/// client: `http://127.0.0.1:<port>[/path]`, `http://localhost:<port>…`
/// or `http://[::1]:<port>…`.
pub fn loopback_redirect(uri: &str) -> bool {
    let rest = ["http://127.0.0.1:", "http://localhost:", "http://[::1]:"]
        .iter()
        .find_map(|prefix| uri.strip_prefix(prefix));
    let Some(rest) = rest else {
        return false;
    };
    let port_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    port_len > 0 && (rest.len() == port_len || rest[port_len..].starts_with('/'))
}

fn scopes_of(text: &str) -> Vec<String> {
    text.split_whitespace().map(expand_scope).collect()
}

/// `GET /o/oauth2/v2/auth`: the consent screen, answered at once.
pub(crate) fn authorize(st: &mut State, req: &Req) -> Response {
    if req.param("client_id") != Some(CLIENT_ID) {
        st.violation(req, "client_id is missing or not the fake's CLIENT_ID");
        return error_page(401, "invalid_client", "The OAuth client was not found.");
    }
    let redirect = req.param("redirect_uri").unwrap_or_default().to_owned();
    if !loopback_redirect(&redirect) {
        st.violation(
            req,
            &format!("redirect_uri {redirect:?} is not a loopback address with a port"),
        );
        return error_page(
            400,
            "redirect_uri_mismatch",
            "You can't sign in to this app because it doesn't comply with Google's OAuth 2.0 policy.",
        );
    }
    if req.param("response_type") != Some("code") {
        st.violation(req, "response_type is not `code`");
        return error_page(
            400,
            "unsupported_response_type",
            "Required parameter is missing or invalid: response_type",
        );
    }
    let scopes = scopes_of(req.param("scope").unwrap_or_default());
    if scopes.is_empty() {
        st.violation(req, "no scope");
        return error_page(400, "invalid_request", "Missing required parameter: scope");
    }
    let challenge = req.param("code_challenge").map(str::to_owned);
    if challenge.is_none() {
        st.violation(req, "no code_challenge: Flynn must use PKCE");
    } else if req.param("code_challenge_method") != Some("S256") {
        st.violation(req, "code_challenge_method is not S256");
    }
    let state = req.param("state").map(str::to_owned);
    if state.is_none() {
        st.violation(req, "no state parameter");
    }
    let mut pairs = form_urlencoded::Serializer::new(String::new());
    if let Some(state) = &state {
        pairs.append_pair("state", state);
    }
    if st.oauth.deny_next {
        st.oauth.deny_next = false;
        pairs.append_pair("error", "access_denied");
    } else {
        let n = st.oauth.next();
        let code = format!("4/0Afake-code-{n}-{}", noise(n));
        let email = st.oauth.consent_as.clone();
        if let Some(last) = st.requests.last_mut() {
            last.account = Some(email.clone());
        }
        st.oauth.codes.insert(
            code.clone(),
            Grant {
                email,
                scopes: scopes.clone(),
                redirect_uri: redirect.clone(),
                challenge,
                plain: req.param("code_challenge_method") != Some("S256"),
                offline: req.param("access_type") == Some("offline"),
                used: false,
            },
        );
        pairs.append_pair("code", &code);
        pairs.append_pair("scope", &scopes.join(" "));
    }
    let separator = if redirect.contains('?') { '&' } else { '?' };
    let location = format!("{redirect}{separator}{}", pairs.finish());
    server::respond(
        302,
        &[
            ("location", &location),
            ("content-type", "text/html; charset=UTF-8"),
        ],
        Body::empty(),
    )
}

/// The form fields of a strictly `application/x-www-form-urlencoded` body.
fn form(st: &mut State, req: &Req) -> Result<HashMap<String, String>, Box<Response>> {
    let typed = req
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !typed {
        st.violation(
            req,
            "the body is not sent as application/x-www-form-urlencoded",
        );
        return Err(Box::new(oauth_error(
            400,
            "invalid_request",
            "Invalid request: the body must be application/x-www-form-urlencoded.",
        )));
    }
    Ok(form_urlencoded::parse(&req.body).into_owned().collect())
}

/// `POST /token`.
pub(crate) fn token(st: &mut State, req: &Req) -> Response {
    let fields = match form(st, req) {
        Ok(fields) => fields,
        Err(response) => return *response,
    };
    let field = |name: &str| fields.get(name).map(String::as_str);
    if field("client_id") != Some(CLIENT_ID) {
        return oauth_error(401, "invalid_client", "The OAuth client was not found.");
    }
    match field("client_secret") {
        None => {
            st.violation(req, "no client_secret");
            return oauth_error(400, "invalid_request", "client_secret is missing.");
        }
        Some(secret) if secret != CLIENT_SECRET => {
            return oauth_error(401, "invalid_client", "Unauthorized");
        }
        Some(_) => {}
    }
    match field("grant_type") {
        Some("authorization_code") => code_grant(st, req, &fields),
        Some("refresh_token") => refresh_grant(st, &fields),
        Some("urn:ietf:params:oauth:grant-type:device_code") => device_grant(st, req, &fields),
        other => {
            st.violation(
                req,
                &format!("grant_type {other:?} is not one Google takes"),
            );
            oauth_error(
                400,
                "unsupported_grant_type",
                &format!("Invalid grant_type: {}", other.unwrap_or_default()),
            )
        }
    }
}

fn set_account(st: &mut State, email: &str) {
    if let Some(last) = st.requests.last_mut() {
        last.account = Some(email.to_owned());
    }
}

fn sub_of(st: &mut State, email: &str) -> String {
    st.account(email).sub.clone()
}

fn code_grant(st: &mut State, req: &Req, fields: &HashMap<String, String>) -> Response {
    let field = |name: &str| fields.get(name).map(String::as_str);
    let Some(code) = field("code") else {
        st.violation(req, "no code");
        return oauth_error(400, "invalid_request", "Missing required parameter: code");
    };
    let Some(grant) = st.oauth.codes.get(code) else {
        st.violation(req, "an authorization code the fake never issued");
        return oauth_error(400, "invalid_grant", "Malformed auth code.");
    };
    if grant.used {
        st.violation(req, "an authorization code used a second time");
        return oauth_error(400, "invalid_grant", "Bad Request");
    }
    if field("redirect_uri") != Some(grant.redirect_uri.as_str()) {
        st.violation(
            req,
            "redirect_uri is not the one given to the authorization endpoint",
        );
        return oauth_error(400, "redirect_uri_mismatch", "Bad Request");
    }
    if let Some(challenge) = &grant.challenge {
        let Some(verifier) = field("code_verifier") else {
            st.violation(req, "no code_verifier");
            return oauth_error(400, "invalid_grant", "Missing code verifier.");
        };
        let shaped = (43..=128).contains(&verifier.len())
            && verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
        let expected = if grant.plain {
            verifier.to_owned()
        } else {
            URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
        };
        if !shaped || expected != *challenge {
            st.violation(req, "code_verifier does not match the code_challenge");
            return oauth_error(400, "invalid_grant", "Invalid code verifier.");
        }
    }
    let email = grant.email.clone();
    let scopes = grant.scopes.clone();
    let offline = grant.offline;
    if let Some(grant) = st.oauth.codes.get_mut(code) {
        grant.used = true;
    }
    set_account(st, &email);
    let sub = sub_of(st, &email);
    super::ok(&st.oauth.issue(&email, &scopes, offline, &sub))
}

fn refresh_grant(st: &mut State, fields: &HashMap<String, String>) -> Response {
    let token = fields.get("refresh_token").cloned().unwrap_or_default();
    let Some(refresh) = st.oauth.refresh.get(&token).filter(|r| !r.revoked) else {
        return oauth_error(400, "invalid_grant", "Token has been expired or revoked.");
    };
    let email = refresh.email.clone();
    let scopes = refresh.scopes.clone();
    set_account(st, &email);
    let sub = sub_of(st, &email);
    super::ok(&st.oauth.access_for(&email, &scopes, Some(token), &sub))
}

fn device_grant(st: &mut State, req: &Req, fields: &HashMap<String, String>) -> Response {
    let code = fields.get("device_code").cloned().unwrap_or_default();
    let interval = Duration::from_secs(st.oauth.device_interval);
    let Some(device) = st.oauth.devices.iter_mut().find(|d| d.device_code == code) else {
        st.violation(req, "a device_code the fake never issued");
        return oauth_error(400, "invalid_grant", "Malformed device code.");
    };
    if device.expires <= now() {
        return oauth_error(400, "expired_token", "Bad Request");
    }
    let polled = instant();
    let too_soon = device
        .last_poll
        .is_some_and(|last| polled.duration_since(last) < interval);
    device.last_poll = Some(polled);
    if too_soon {
        st.violation(req, "the device code was polled faster than its interval");
        return oauth_error(403, "slow_down", "Forbidden");
    }
    match device.decision.clone() {
        Decision::Pending => oauth_error(428, "authorization_pending", "Precondition Required"),
        Decision::Denied => oauth_error(403, "access_denied", "Forbidden"),
        Decision::Approved(_) if device.used => oauth_error(400, "invalid_grant", "Bad Request"),
        Decision::Approved(email) => {
            device.used = true;
            let scopes = device.scopes.clone();
            set_account(st, &email);
            let sub = sub_of(st, &email);
            super::ok(&st.oauth.issue(&email, &scopes, true, &sub))
        }
    }
}

/// `POST /device/code`.
pub(crate) fn device_code(st: &mut State, req: &Req) -> Response {
    let fields = match form(st, req) {
        Ok(fields) => fields,
        Err(response) => return *response,
    };
    if fields.get("client_id").map(String::as_str) != Some(CLIENT_ID) {
        return oauth_error(401, "invalid_client", "The OAuth client was not found.");
    }
    let scope = fields.get("scope").cloned().unwrap_or_default();
    if scope.trim().is_empty() {
        st.violation(req, "no scope");
        return oauth_error(400, "invalid_scope", "Missing required parameter: scope");
    }
    let allowed: Vec<String> = DEVICE_SCOPES.iter().map(|s| expand_scope(s)).collect();
    let scopes = scopes_of(&scope);
    if scopes.iter().any(|s| !allowed.contains(s)) {
        return server::json(400, &json!({"error": "invalid_scope"}));
    }
    let n = st.oauth.next();
    let device = Device {
        device_code: format!("AH-1Ng-fake-device-{n}-{}", noise(n)),
        user_code: user_code(n),
        scopes,
        expires: now() + chrono::Duration::seconds(1800),
        last_poll: None,
        decision: Decision::Pending,
        used: false,
    };
    let answer = json!({
        "device_code": device.device_code,
        "user_code": device.user_code,
        "verification_url": VERIFICATION_URL,
        "expires_in": 1800,
        "interval": st.oauth.device_interval,
    });
    st.oauth.devices.push(device);
    super::ok(&answer)
}

/// `POST /revoke`: the token in the form body, or in the query string as
/// Google's own example sends it.
pub(crate) fn revoke(st: &mut State, req: &Req) -> Response {
    let fields = if req.param("token").is_some() && req.body.is_empty() {
        HashMap::new()
    } else {
        match form(st, req) {
            Ok(fields) => fields,
            Err(response) => return *response,
        }
    };
    let token = fields
        .get("token")
        .map(String::as_str)
        .or_else(|| req.param("token"))
        .unwrap_or_default()
        .to_owned();
    let refresh = if st.oauth.refresh.contains_key(&token) {
        Some(token.clone())
    } else if let Some(access) = st.oauth.access.get_mut(&token) {
        access.dead = true;
        access.refresh.clone()
    } else {
        return oauth_error(400, "invalid_token", "Bad Request");
    };
    if let Some(refresh) = refresh {
        if let Some(entry) = st.oauth.refresh.get_mut(&refresh) {
            entry.revoked = true;
        }
        for access in st.oauth.access.values_mut() {
            if access.refresh.as_deref() == Some(refresh.as_str()) {
                access.dead = true;
            }
        }
    }
    st.oauth.revoked.push(token);
    super::ok(&json!({}))
}

/// `GET /v1/userinfo`.
pub(crate) fn userinfo(st: &mut State, caller: &Caller) -> Response {
    if !caller.has_any(&["openid", "email"]) {
        return super::insufficient_scope("openidconnect.googleapis.com", &["openid", "email"]);
    }
    let sub = sub_of(st, &caller.email);
    super::ok(&json!({"sub": sub, "email": caller.email, "email_verified": true}))
}

impl FakeGoogle {
    /// The account that approves the consent screen and device codes from
    /// now on (it is added if new).
    pub fn consent_as(&self, email: &str) {
        let mut st = self.lock();
        st.account(email);
        st.oauth.consent_as = email.to_owned();
    }

    /// The next consent (or device approval) is a refusal.
    pub fn deny_consent(&self) {
        self.lock().oauth.deny_next = true;
    }

    /// Tokens for `email` with `scopes` (short names such as
    /// `gmail.readonly` or full URLs), as if the user had logged in.
    pub fn issue_tokens(&self, email: &str, scopes: &[&str]) -> Tokens {
        let mut st = self.lock();
        let sub = st.account(email).sub.clone();
        let scopes: Vec<String> = scopes.iter().map(|s| expand_scope(s)).collect();
        let answer = st.oauth.issue(email, &scopes, true, &sub);
        Tokens {
            access_token: answer["access_token"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            refresh_token: answer["refresh_token"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        }
    }

    /// Every access token issued so far is now expired (401); refresh
    /// tokens still work.
    pub fn expire_access_tokens(&self) {
        let past = now() - chrono::Duration::seconds(1);
        for token in self.lock().oauth.access.values_mut() {
            token.expires = past;
        }
    }

    /// The tokens revoked through `POST /revoke`, in order.
    pub fn revoked(&self) -> Vec<String> {
        self.lock().oauth.revoked.clone()
    }

    /// The user enters `user_code` and approves (as
    /// [`consent_as`](Self::consent_as), or refuses after
    /// [`deny_consent`](Self::deny_consent)). Panics on an unknown code.
    pub fn approve_device(&self, user_code: &str) {
        let mut st = self.lock();
        let decision = if st.oauth.deny_next {
            st.oauth.deny_next = false;
            Decision::Denied
        } else {
            Decision::Approved(st.oauth.consent_as.clone())
        };
        decide(&mut st, user_code, decision);
    }

    /// The user enters `user_code` and refuses. Panics on an unknown code.
    pub fn deny_device(&self, user_code: &str) {
        decide(&mut self.lock(), user_code, Decision::Denied);
    }

    /// Every device code issued so far has expired (`expired_token`).
    pub fn expire_device_codes(&self) {
        let past = now() - chrono::Duration::seconds(1);
        for device in &mut self.lock().oauth.devices {
            device.expires = past;
        }
    }

    /// The polling interval new device codes get (Google's is 5 seconds;
    /// 0 lets a test poll at once, since polls are timed on the real
    /// clock).
    pub fn set_device_interval(&self, secs: u64) {
        self.lock().oauth.device_interval = secs;
    }

    /// The lifetime of access tokens issued from now on (3599 seconds).
    pub fn set_access_token_lifetime(&self, secs: i64) {
        self.lock().oauth.lifetime = secs;
    }
}

fn decide(st: &mut State, user_code: &str, decision: Decision) {
    match st
        .oauth
        .devices
        .iter_mut()
        .find(|d| d.user_code == user_code)
    {
        Some(device) => device.decision = decision,
        None => panic!("flynn-testkit: no device code has the user code {user_code}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{client, form, get};
    use super::super::{CLIENT_ID, CLIENT_SECRET, FakeGoogle, OWNER};
    use super::*;

    const VERIFIER: &str = "a-verifier-of-at-least-forty-three-characters-0123";

    fn challenge() -> String {
        URL_SAFE_NO_PAD.encode(Sha256::digest(VERIFIER.as_bytes()))
    }

    async fn consent(fake: &FakeGoogle, redirect: &str) -> (u16, String) {
        let response = client()
            .get(format!("{}/o/oauth2/v2/auth", fake.base_url()))
            .query(&[
                ("client_id", CLIENT_ID),
                ("redirect_uri", redirect),
                ("response_type", "code"),
                (
                    "scope",
                    "openid email https://www.googleapis.com/auth/gmail.readonly",
                ),
                ("code_challenge", &challenge()),
                ("code_challenge_method", "S256"),
                ("state", "xyz 1"),
                ("access_type", "offline"),
                ("login_hint", OWNER),
            ])
            .send()
            .await
            .unwrap();
        let location = response
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (response.status().as_u16(), location)
    }

    fn query_of(location: &str) -> HashMap<String, String> {
        let (_, query) = location.split_once('?').unwrap();
        form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect()
    }

    #[tokio::test]
    async fn the_loopback_flow_gives_tokens_that_refresh() {
        let fake = FakeGoogle::start();
        let (status, location) = consent(&fake, "http://127.0.0.1:8765/callback").await;
        assert_eq!(status, 302);
        assert!(location.starts_with("http://127.0.0.1:8765/callback?"));
        let query = query_of(&location);
        assert_eq!(query["state"], "xyz 1");
        assert_eq!(
            query["scope"],
            "openid https://www.googleapis.com/auth/userinfo.email https://www.googleapis.com/auth/gmail.readonly"
        );
        let exchange = [
            ("grant_type", "authorization_code"),
            ("code", query["code"].as_str()),
            ("redirect_uri", "http://127.0.0.1:8765/callback"),
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
            ("code_verifier", VERIFIER),
        ];
        let (status, tokens) = form(&fake, "/token", &exchange).await;
        assert_eq!(status, 200, "{tokens}");
        assert_eq!(tokens["token_type"], "Bearer");
        assert_eq!(tokens["expires_in"], 3599);
        assert_eq!(tokens["scope"], query["scope"].as_str());
        assert!(tokens["id_token"].as_str().unwrap().split('.').count() == 3);
        let access = tokens["access_token"].as_str().unwrap();
        let (status, info) = get(&fake, access, "/v1/userinfo").await;
        assert_eq!(status, 200);
        assert_eq!(info["email"], OWNER);
        assert_eq!(info["email_verified"], true);
        assert_eq!(fake.violations(), Vec::<String>::new());

        let refresh = tokens["refresh_token"].as_str().unwrap();
        let (status, renewed) = form(
            &fake,
            "/token",
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh),
                ("client_id", CLIENT_ID),
                ("client_secret", CLIENT_SECRET),
            ],
        )
        .await;
        assert_eq!(status, 200);
        assert_ne!(renewed["access_token"], tokens["access_token"]);
        assert_eq!(renewed.get("refresh_token"), None);

        // The code works once only.
        let (status, error) = form(&fake, "/token", &exchange).await;
        assert_eq!(
            (status, error),
            (
                400,
                json!({"error": "invalid_grant", "error_description": "Bad Request"})
            )
        );
        assert_eq!(fake.violations().len(), 1);
        assert_eq!(fake.requests()[1].account.as_deref(), Some(OWNER));
    }

    #[tokio::test]
    async fn a_wrong_verifier_client_or_redirect_is_refused() {
        let fake = FakeGoogle::start();
        let (status, _) = consent(&fake, "https://example.com/callback").await;
        assert_eq!(status, 400);
        assert_eq!(fake.violations().len(), 1);
        let (_, location) = consent(&fake, "http://localhost:9000").await;
        let code = query_of(&location)["code"].clone();
        let mut exchange = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", "http://localhost:9000"),
            ("client_id", CLIENT_ID),
            ("client_secret", "wrong"),
            ("code_verifier", VERIFIER),
        ];
        let (status, error) = form(&fake, "/token", &exchange).await;
        assert_eq!((status, &error["error"]), (401, &json!("invalid_client")));
        exchange[4].1 = CLIENT_SECRET;
        exchange[5].1 = "another-verifier-of-at-least-forty-three-characters";
        let (status, error) = form(&fake, "/token", &exchange).await;
        assert_eq!(
            (status, error),
            (
                400,
                json!({"error": "invalid_grant", "error_description": "Invalid code verifier."})
            )
        );
        assert_eq!(fake.violations().len(), 2);
        // A JSON body is not what the token endpoint takes.
        let response = client()
            .post(format!("{}/token", fake.base_url()))
            .json(&json!({"grant_type": "refresh_token"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400);
        assert_eq!(fake.violations().len(), 3);
    }

    #[tokio::test]
    async fn consent_can_be_refused() {
        let fake = FakeGoogle::start();
        fake.deny_consent();
        let (status, location) = consent(&fake, "http://127.0.0.1:1/").await;
        assert_eq!(status, 302);
        let query = query_of(&location);
        assert_eq!(query["error"], "access_denied");
        assert_eq!(query.get("code"), None);
    }

    #[tokio::test]
    async fn the_device_flow_polls_until_approved() {
        let fake = FakeGoogle::start();
        let device = |scope: &'static str| {
            let fake = &fake;
            async move {
                form(
                    fake,
                    "/device/code",
                    &[("client_id", CLIENT_ID), ("scope", scope)],
                )
                .await
            }
        };
        let (status, error) = device("https://www.googleapis.com/auth/gmail.readonly").await;
        assert_eq!((status, error), (400, json!({"error": "invalid_scope"})));
        let (status, code) = device("openid email drive.file").await;
        assert_eq!(status, 200);
        assert_eq!(code["verification_url"], VERIFICATION_URL);
        assert_eq!(code["expires_in"], 1800);
        assert_eq!(code["interval"], 5);
        let user_code = code["user_code"].as_str().unwrap();
        assert_eq!(user_code.len(), 9);
        assert_eq!(&user_code[4..5], "-");
        let poll = [
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
            ("device_code", code["device_code"].as_str().unwrap()),
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
        ];
        let (status, error) = form(&fake, "/token", &poll).await;
        assert_eq!(
            (status, &error["error"]),
            (428, &json!("authorization_pending"))
        );
        // Polling again at once is too fast.
        let (status, error) = form(&fake, "/token", &poll).await;
        assert_eq!((status, &error["error"]), (403, &json!("slow_down")));
        assert_eq!(fake.violations().len(), 1);

        fake.set_device_interval(0);
        let (_, code) = device("email").await;
        let poll = [
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
            ("device_code", code["device_code"].as_str().unwrap()),
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
        ];
        fake.add_account("other@example.com");
        fake.consent_as("other@example.com");
        fake.approve_device(code["user_code"].as_str().unwrap());
        let (status, tokens) = form(&fake, "/token", &poll).await;
        assert_eq!(status, 200);
        assert!(tokens["refresh_token"].is_string());
        let (_, info) = get(
            &fake,
            tokens["access_token"].as_str().unwrap(),
            "/v1/userinfo",
        )
        .await;
        assert_eq!(info["email"], "other@example.com");

        let (_, code) = device("email").await;
        fake.deny_device(code["user_code"].as_str().unwrap());
        let denied = [
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
            ("device_code", code["device_code"].as_str().unwrap()),
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
        ];
        let (status, error) = form(&fake, "/token", &denied).await;
        assert_eq!((status, &error["error"]), (403, &json!("access_denied")));
        fake.expire_device_codes();
        let (status, error) = form(&fake, "/token", &denied).await;
        assert_eq!((status, &error["error"]), (400, &json!("expired_token")));
    }

    #[tokio::test]
    async fn revoking_a_refresh_token_ends_the_grant() {
        let fake = FakeGoogle::start();
        let tokens = fake.issue_tokens(OWNER, &["email"]);
        let (status, _) = form(&fake, "/revoke", &[("token", &tokens.refresh_token)]).await;
        assert_eq!(status, 200);
        assert_eq!(fake.revoked(), vec![tokens.refresh_token.clone()]);
        let (status, _) = get(&fake, &tokens.access_token, "/v1/userinfo").await;
        assert_eq!(status, 401);
        let (status, error) = form(
            &fake,
            "/token",
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &tokens.refresh_token),
                ("client_id", CLIENT_ID),
                ("client_secret", CLIENT_SECRET),
            ],
        )
        .await;
        assert_eq!(
            (status, error),
            (
                400,
                json!({"error": "invalid_grant", "error_description": "Token has been expired or revoked."})
            )
        );
        let (status, error) = form(&fake, "/revoke", &[("token", "nonsense")]).await;
        assert_eq!((status, &error["error"]), (400, &json!("invalid_token")));

        // Revoking an access token (in the query, as Google's example
        // does) revokes its refresh token too.
        let other = fake.issue_tokens(OWNER, &["email"]);
        let response = client()
            .post(format!(
                "{}/revoke?token={}",
                fake.base_url(),
                other.access_token
            ))
            .header("content-type", "application/x-www-form-urlencoded")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let (status, _) = form(
            &fake,
            "/token",
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &other.refresh_token),
                ("client_id", CLIENT_ID),
                ("client_secret", CLIENT_SECRET),
            ],
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(fake.violations(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn api_calls_need_a_live_token_with_the_scope() {
        let fake = FakeGoogle::start();
        let tokens = fake.issue_tokens(OWNER, &["gmail.send"]);
        let response = client()
            .get(format!("{}/gmail/v1/users/me/profile", fake.base_url()))
            .bearer_auth(&tokens.access_token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
        assert_eq!(
            body["error"]["errors"][0]["reason"],
            "insufficientPermissions"
        );
        assert_eq!(
            body["error"]["details"][0]["reason"],
            "ACCESS_TOKEN_SCOPE_INSUFFICIENT"
        );

        fake.expire_access_tokens();
        let response = client()
            .get(format!("{}/gmail/v1/users/me/profile", fake.base_url()))
            .bearer_auth(&tokens.access_token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401);
        assert!(
            response.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer ")
        );
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["errors"][0]["reason"], "authError");
        assert_eq!(body["error"]["errors"][0]["message"], "Invalid Credentials");
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        assert_eq!(fake.violations(), Vec::<String>::new());

        let live = fake.issue_tokens(OWNER, &["gmail.readonly"]);
        fake.rate_limit(1, 7);
        let response = client()
            .get(format!("{}/gmail/v1/users/me/profile", fake.base_url()))
            .bearer_auth(&live.access_token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 429);
        assert_eq!(response.headers()["retry-after"], "7");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["errors"][0]["reason"], "rateLimitExceeded");
        let (status, profile) = get(&fake, &live.access_token, "/gmail/v1/users/me/profile").await;
        assert_eq!(status, 200);
        assert_eq!(profile["emailAddress"], OWNER);

        let response = client()
            .get(format!("{}/gmail/v1/users/me/profile", fake.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401);
        assert_eq!(fake.violations().len(), 1);
    }
}
