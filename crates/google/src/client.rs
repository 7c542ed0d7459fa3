//! An account's API calls: tokens, errors, rate limits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flynn_protocol::config::{GoogleConfig, GoogleService};
use reqwest::Method;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::oauth::{OAuth, Tokens};
use crate::service::scope_of;
use crate::store::{Account, Grant};
use crate::{AuthStore, Endpoints, GoogleError, default_auth_path, scope_label, service_granted};

/// An access token is refreshed this long before it expires.
const REFRESH_MARGIN_SECS: i64 = 60;
/// Tries of one call that Google asks to slow down.
const RATE_LIMIT_TRIES: u32 = 3;

/// An OAuth client: the owner's own, from their Google Cloud project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    pub id: String,
    pub secret: Option<String>,
}

/// The owner's Google accounts, for the tools, the watcher and the CLI.
#[derive(Debug)]
pub struct Google {
    http: reqwest::Client,
    endpoints: Endpoints,
    store: AuthStore,
    client: Option<ClientCredentials>,
    account: Option<String>,
    services: Vec<GoogleService>,
    /// One refresh at a time (two calls needing one make one).
    refresh: tokio::sync::Mutex<()>,
    /// The longest `Retry-After` waited inside one call.
    max_wait: Duration,
}

/// One API request, rebuilt for each try.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    method: Method,
    url: String,
    query: Vec<(String, String)>,
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    None,
    Json(Value),
    Bytes { content_type: String, data: Vec<u8> },
}

impl Call {
    pub(crate) fn new(method: Method, url: impl Into<String>) -> Self {
        Call {
            method,
            url: url.into(),
            query: Vec::new(),
            body: Body::None,
        }
    }

    pub(crate) fn get(url: impl Into<String>) -> Self {
        Call::new(Method::GET, url)
    }

    pub(crate) fn post(url: impl Into<String>) -> Self {
        Call::new(Method::POST, url)
    }

    pub(crate) fn query(mut self, name: &str, value: impl ToString) -> Self {
        self.query.push((name.to_owned(), value.to_string()));
        self
    }

    pub(crate) fn query_opt(self, name: &str, value: Option<impl ToString>) -> Self {
        match value {
            Some(value) => self.query(name, value),
            None => self,
        }
    }

    pub(crate) fn json(mut self, body: Value) -> Self {
        self.body = Body::Json(body);
        self
    }

    pub(crate) fn bytes(mut self, content_type: impl Into<String>, data: Vec<u8>) -> Self {
        self.body = Body::Bytes {
            content_type: content_type.into(),
            data,
        };
        self
    }
}

/// Google's error shape.
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: ErrorDetail,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    errors: Vec<ErrorItem>,
    #[serde(default)]
    details: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorItem {
    #[serde(default)]
    reason: Option<String>,
}

impl Google {
    /// From the config's `google` block; `env` gives `GOOGLE_CLIENT_ID`,
    /// `GOOGLE_CLIENT_SECRET`, `HOME` and `XDG_CONFIG_HOME`.
    pub fn from_config(
        config: &GoogleConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, GoogleError> {
        let path = match &config.auth_file {
            Some(path) => path.clone(),
            None => default_auth_path(&env).ok_or_else(|| {
                GoogleError::Store(
                    "cannot tell where the auth store is: HOME is not set (set google.auth_file)"
                        .into(),
                )
            })?,
        };
        let id = config
            .client_id
            .clone()
            .or_else(|| env("GOOGLE_CLIENT_ID"))
            .filter(|id| !id.trim().is_empty());
        let secret = config
            .client_secret
            .clone()
            .or_else(|| env("GOOGLE_CLIENT_SECRET"))
            .filter(|s| !s.trim().is_empty());
        let mut google = Google::new(
            AuthStore::at(path),
            Endpoints::from_api_url(config.api_url.as_deref()),
            id.map(|id| ClientCredentials { id, secret }),
        );
        google.account = config.account.clone();
        google.services = config.services.clone();
        Ok(google)
    }

    pub fn new(store: AuthStore, endpoints: Endpoints, client: Option<ClientCredentials>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            // The token endpoint must not be followed elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("flynn/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Google {
            http,
            endpoints,
            store,
            client,
            account: None,
            services: GoogleService::ALL.to_vec(),
            refresh: tokio::sync::Mutex::new(()),
            max_wait: Duration::from_secs(30),
        }
    }

    /// Waits at most `wait` for a rate limit inside one call.
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    pub fn store(&self) -> &AuthStore {
        &self.store
    }

    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The services whose tools are offered.
    pub fn services(&self) -> &[GoogleService] {
        &self.services
    }

    /// The client from the config or the environment.
    pub fn client(&self) -> Option<&ClientCredentials> {
        self.client.as_ref()
    }

    /// The OAuth endpoints for `client`.
    pub fn oauth(&self, client: ClientCredentials) -> OAuth {
        OAuth::new(self.http.clone(), self.endpoints.clone(), client)
    }

    /// The account a call uses: `requested`, else `google.account`, else
    /// the store's default.
    pub fn resolve(&self, requested: Option<&str>) -> Result<String, GoogleError> {
        let file = self.store.load()?;
        let wanted = requested
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .or(self.account.as_deref());
        match file.google.pick(wanted) {
            Some((name, _)) => Ok(name.to_owned()),
            None => {
                let known: Vec<&str> = file.google.accounts.keys().map(String::as_str).collect();
                Err(GoogleError::NotSignedIn(match (wanted, known.is_empty()) {
                    (_, true) => {
                        "no Google account is signed in; run `flynn auth google login`".to_owned()
                    }
                    (Some(wanted), false) => format!(
                        "the Google account {wanted} is not signed in (signed in: {}); run `flynn auth google login --account {wanted}`",
                        known.join(", ")
                    ),
                    (None, false) => "no Google account is signed in".to_owned(),
                }))
            }
        }
    }

    /// Keeps a sign-in: the account's grants are replaced by this one
    /// (which covers everything granted before, as sign-in asks
    /// `include_granted_scopes`); the first account becomes the default.
    pub fn keep_sign_in(
        &self,
        email: &str,
        client: &ClientCredentials,
        tokens: &Tokens,
        asked: &[String],
    ) -> Result<(), GoogleError> {
        let now = chrono::Utc::now();
        self.store.update(|file| {
            let previous = file.google.accounts.remove(email);
            let refresh_token = tokens.refresh_token.clone().or_else(|| {
                previous
                    .as_ref()
                    .filter(|p| p.client_id == client.id)
                    .and_then(|p| p.grants.iter().find_map(|g| g.refresh_token.clone()))
            });
            file.google.accounts.insert(
                email.to_owned(),
                Account {
                    client_id: client.id.clone(),
                    client_secret: client.secret.clone(),
                    grants: vec![Grant {
                        refresh_token,
                        access_token: Some(tokens.access_token.clone()),
                        expires_at: tokens
                            .expires_in
                            .map(|d| now.timestamp() + i64::try_from(d.as_secs()).unwrap_or(0)),
                        scopes: tokens.scopes.clone().unwrap_or_else(|| asked.to_vec()),
                        from: None,
                    }],
                    signed_in_at: Some(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                },
            );
            if file
                .google
                .default
                .as_ref()
                .is_none_or(|d| !file.google.accounts.contains_key(d))
            {
                file.google.default = Some(email.to_owned());
            }
        })
    }

    /// Forgets `account` (after revoking its tokens at Google when
    /// `revoke`). Returns what was done, for the person.
    pub async fn sign_out(&self, account: &str, revoke: bool) -> Result<String, GoogleError> {
        let file = self.store.load()?;
        let Some((name, found)) = file.google.pick(Some(account)) else {
            return Err(GoogleError::NotSignedIn(format!(
                "the Google account {account} is not signed in"
            )));
        };
        let name = name.to_owned();
        let mut said = Vec::new();
        if revoke {
            let oauth = self.oauth(self.client_of(found));
            for grant in &found.grants {
                let Some(token) = grant.refresh_token.as_ref().or(grant.access_token.as_ref())
                else {
                    continue;
                };
                match oauth.revoke(token).await {
                    Ok(()) => said.push("revoked its access at Google".to_owned()),
                    // Already revoked or expired: nothing left to revoke.
                    Err(GoogleError::Api {
                        reason: Some(r), ..
                    }) if r == "invalid_token" => {
                        said.push("Google had already revoked its access".to_owned());
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.store.update(|file| {
            file.google.accounts.remove(&name);
            if file.google.default.as_deref() == Some(name.as_str()) {
                file.google.default = file.google.accounts.keys().next().cloned();
            }
        })?;
        said.dedup();
        said.push(format!(
            "removed {name} from {}",
            self.store.path().display()
        ));
        Ok(said.join("; "))
    }

    fn client_of(&self, account: &Account) -> ClientCredentials {
        let secret = account.client_secret.clone().or_else(|| {
            self.client
                .as_ref()
                .filter(|c| c.id == account.client_id)
                .and_then(|c| c.secret.clone())
        });
        ClientCredentials {
            id: account.client_id.clone(),
            secret,
        }
    }

    /// A valid access token of `account` for `service` (refreshed when it
    /// expires within a minute, or when `stale` is Google's last answer).
    pub async fn access_token(
        &self,
        account: &str,
        service: Option<GoogleService>,
        stale: Option<&str>,
    ) -> Result<String, GoogleError> {
        let _one = self.refresh.lock().await;
        let file = self.store.load()?;
        let Some((name, found)) = file.google.pick(Some(account)) else {
            return Err(self.resolve(Some(account)).err().unwrap_or_else(|| {
                GoogleError::NotSignedIn(format!("{account} is not signed in"))
            }));
        };
        let grant_index = match service {
            Some(service) => found
                .grants
                .iter()
                .position(|g| service_granted(service, &g.scopes))
                .ok_or_else(|| GoogleError::MissingScope {
                    account: name.to_owned(),
                    service,
                    scope: scope_label(&scope_of(service)).to_owned(),
                })?,
            None => 0,
        };
        let Some(grant) = found.grants.get(grant_index) else {
            return Err(GoogleError::SignedOut {
                account: name.to_owned(),
                reason: "no tokens are kept for it".into(),
            });
        };
        let now = chrono::Utc::now().timestamp();
        if let (Some(token), Some(expires)) = (&grant.access_token, grant.expires_at)
            && expires > now + REFRESH_MARGIN_SECS
            && stale != Some(token.as_str())
        {
            return Ok(token.clone());
        }
        let Some(refresh_token) = grant.refresh_token.clone() else {
            return Err(GoogleError::SignedOut {
                account: name.to_owned(),
                reason: "its access token expired and no refresh token is kept".into(),
            });
        };
        let tokens = self
            .oauth(self.client_of(found))
            .refresh(&refresh_token)
            .await
            .map_err(|e| match e {
                GoogleError::Api {
                    reason: Some(reason),
                    message,
                    ..
                } if reason == "invalid_grant" => GoogleError::SignedOut {
                    account: name.to_owned(),
                    reason: message,
                },
                other => other,
            })?;
        let name = name.to_owned();
        let access = tokens.access_token.clone();
        self.store.update(|file| {
            let Some(account) = file.google.accounts.get_mut(&name) else {
                return;
            };
            // Matched by its refresh token: another writer may have
            // changed the list since it was read.
            if let Some(grant) = account
                .grants
                .iter_mut()
                .find(|g| g.refresh_token.as_deref() == Some(refresh_token.as_str()))
            {
                grant.access_token = Some(tokens.access_token.clone());
                grant.expires_at = tokens
                    .expires_in
                    .map(|d| now + i64::try_from(d.as_secs()).unwrap_or(0));
                if let Some(scopes) = &tokens.scopes {
                    grant.scopes.clone_from(scopes);
                }
                if let Some(rotated) = &tokens.refresh_token {
                    grant.refresh_token = Some(rotated.clone());
                }
            }
        })?;
        Ok(access)
    }

    /// Sends `call` for `service` as `account` (else the default): a
    /// rejected token is refreshed once; a rate limit or a 503 is waited
    /// out when Google asks for at most [`with_max_wait`](Self::with_max_wait).
    pub(crate) async fn send(
        &self,
        account: Option<&str>,
        service: GoogleService,
        call: &Call,
    ) -> Result<reqwest::Response, GoogleError> {
        let account = self.resolve(account)?;
        let mut stale: Option<String> = None;
        let mut waited = 0;
        loop {
            let token = self
                .access_token(&account, Some(service), stale.as_deref())
                .await?;
            let mut request = self
                .http
                .request(call.method.clone(), &call.url)
                .bearer_auth(&token);
            if !call.query.is_empty() {
                request = request.query(&call.query);
            }
            request = match &call.body {
                Body::None => request,
                Body::Json(value) => request.json(value),
                Body::Bytes { content_type, data } => request
                    .header(reqwest::header::CONTENT_TYPE, content_type)
                    .body(data.clone()),
            };
            let response = request.send().await?;
            let status = response.status().as_u16();
            if response.status().is_success() {
                return Ok(response);
            }
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let body: ErrorBody = response
                .bytes()
                .await
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            let reasons: Vec<String> = body
                .error
                .errors
                .iter()
                .filter_map(|e| e.reason.clone())
                .chain(
                    body.error
                        .details
                        .iter()
                        .filter_map(|d| d["reason"].as_str().map(str::to_owned)),
                )
                .collect();
            let has = |reason: &str| reasons.iter().any(|r| r == reason);
            if status == 401 && stale.is_none() {
                stale = Some(token);
                continue;
            }
            if status == 403
                && (has("insufficientPermissions") || has("ACCESS_TOKEN_SCOPE_INSUFFICIENT"))
            {
                return Err(GoogleError::MissingScope {
                    account,
                    service,
                    scope: scope_label(&scope_of(service)).to_owned(),
                });
            }
            let limited = status == 429
                || status == 503
                || (status == 403 && (has("rateLimitExceeded") || has("userRateLimitExceeded")));
            if limited {
                let wait = retry_after.unwrap_or(1 << waited);
                if waited + 1 < RATE_LIMIT_TRIES && Duration::from_secs(wait) <= self.max_wait {
                    waited += 1;
                    tracing::info!(
                        account,
                        status,
                        wait,
                        "Google asks to slow down; waiting before trying again"
                    );
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                    continue;
                }
                return Err(GoogleError::RateLimited {
                    retry_after_secs: wait,
                });
            }
            if status == 401 {
                return Err(GoogleError::SignedOut {
                    account,
                    reason: "Google refused a freshly refreshed token".into(),
                });
            }
            return Err(GoogleError::Api {
                status,
                reason: reasons.into_iter().next().or(body.error.status),
                message: if body.error.message.is_empty() {
                    format!("HTTP {status}")
                } else {
                    body.error.message
                },
            });
        }
    }

    /// [`send`](Self::send), its JSON answer read as `T`.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        account: Option<&str>,
        service: GoogleService,
        call: &Call,
    ) -> Result<T, GoogleError> {
        let response = self.send(account, service, call).await?;
        let bytes = response.bytes().await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            GoogleError::Transport(format!(
                "Google's answer to {} is not what Flynn expects: {e}",
                call.url
            ))
        })
    }

    /// Takes in token files of an older install (`*-token.json` beside the
    /// store) once each: every one becomes a grant of the account it
    /// belongs to. The files are left in place. Returns a line per file.
    pub async fn migrate_legacy(&self) -> Result<Vec<String>, GoogleError> {
        let dir = self.store.dir().to_owned();
        let done = self.store.load()?.google.migrated;
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with("-token.json"))
                        && !done.contains(p)
                })
                .collect(),
            Err(_) => return Ok(Vec::new()),
        };
        files.sort();
        let mut said = Vec::new();
        for path in files {
            let line = match self.migrate_one(&path).await {
                Ok(account) => format!(
                    "took in {} as a grant of {account}; the file is left in place and can be deleted",
                    path.display()
                ),
                Err(e) => format!("could not take in {}: {e}", path.display()),
            };
            self.store
                .update(|file| file.google.migrated.push(path.clone()))?;
            said.push(line);
        }
        Ok(said)
    }

    async fn migrate_one(&self, path: &Path) -> Result<String, GoogleError> {
        #[derive(Deserialize)]
        struct Legacy {
            access_token: Option<String>,
            refresh_token: Option<String>,
            scope: Option<String>,
            /// Milliseconds since the epoch (google-auth-library's field).
            expiry_date: Option<i64>,
        }
        let text =
            std::fs::read(path).map_err(|e| GoogleError::Store(format!("cannot read it: {e}")))?;
        let legacy: Legacy = serde_json::from_slice(&text)
            .map_err(|e| GoogleError::Store(format!("it is not a token file: {e}")))?;
        let client = match &self.client {
            Some(client) => client.clone(),
            None => legacy_client(path.parent().unwrap_or(Path::new(".")))
                .ok_or(GoogleError::NoClient)?,
        };
        let oauth = self.oauth(client.clone());
        let mut grant = Grant {
            refresh_token: legacy.refresh_token.clone(),
            access_token: legacy.access_token.clone(),
            expires_at: legacy.expiry_date.map(|ms| ms / 1000),
            scopes: legacy
                .scope
                .as_deref()
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            from: Some(path.to_owned()),
        };
        let now = chrono::Utc::now().timestamp();
        let fresh = grant
            .expires_at
            .is_some_and(|e| e > now + REFRESH_MARGIN_SECS);
        let access = match (&grant.access_token, fresh, &grant.refresh_token) {
            (Some(token), true, _) => token.clone(),
            (_, _, Some(refresh)) => {
                let tokens = oauth.refresh(refresh).await?;
                grant.access_token = Some(tokens.access_token.clone());
                grant.expires_at = tokens
                    .expires_in
                    .map(|d| now + i64::try_from(d.as_secs()).unwrap_or(0));
                if let Some(scopes) = tokens.scopes {
                    grant.scopes = scopes;
                }
                tokens.access_token
            }
            _ => {
                return Err(GoogleError::Invalid(
                    "it holds neither a live access token nor a refresh token".into(),
                ));
            }
        };
        // The account's name: its address when the grant can read it, else
        // the file's name (`gmail` for gmail-token.json).
        let email = match oauth.email(&access).await {
            Ok(email) => email,
            Err(_) => path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix("-token.json"))
                .unwrap_or("legacy")
                .to_owned(),
        };
        self.store.update(|file| {
            let account = file
                .google
                .accounts
                .entry(email.clone())
                .or_insert_with(|| Account {
                    client_id: client.id.clone(),
                    client_secret: client.secret.clone(),
                    grants: Vec::new(),
                    signed_in_at: Some(
                        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    ),
                });
            account.grants.push(grant);
            if file.google.default.is_none() {
                file.google.default = Some(email.clone());
            }
        })?;
        Ok(email)
    }
}

/// The client of an older install: `credentials.json` or
/// `client_secret*.json` (Google's download, `{"installed": {…}}`).
fn legacy_client(dir: &Path) -> Option<ClientCredentials> {
    let mut candidates = vec![dir.join("credentials.json")];
    if let Ok(entries) = std::fs::read_dir(dir) {
        candidates.extend(
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("client_secret") && n.ends_with(".json"))
                }),
        );
    }
    candidates.into_iter().find_map(|path| {
        let value: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let client = value.get("installed").or_else(|| value.get("web"))?;
        Some(ClientCredentials {
            id: client["client_id"].as_str()?.to_owned(),
            secret: client["client_secret"].as_str().map(str::to_owned),
        })
    })
}
