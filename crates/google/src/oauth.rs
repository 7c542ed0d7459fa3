//! Signing in to Google, refreshing and revoking tokens.
//!
//! Installed apps sign in with the authorization-code flow and PKCE: the
//! browser is sent to Google's consent page and comes back to a loopback
//! address Flynn listens on ([`Loopback`]); on a machine without a browser
//! the owner opens the link elsewhere and pastes the address the browser
//! ends on ([`code_from_redirect`]). The device flow ([`OAuth::device_start`])
//! works too, but Google allows it only for a few scopes (sign-in and the
//! files Flynn itself creates in Drive), so Gmail, Calendar, Docs, Tasks
//! and all of Drive need one of the other two.

use std::time::Duration;

use oauth2::basic::{BasicClient, BasicTokenResponse};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
    DeviceAuthorizationUrl, EndpointNotSet, EndpointSet, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, StandardDeviceAuthorizationResponse,
    TokenResponse, TokenUrl,
};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::error::chain;
use crate::{ClientCredentials, Endpoints, GoogleError};

/// The scopes Google lets the device flow ask for.
pub const DEVICE_FLOW_SCOPES: [&str; 9] = [
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

type Client = BasicClient<EndpointSet, EndpointSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// Tokens Google gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub access_token: String,
    pub refresh_token: Option<String>,
    pub expires_in: Option<Duration>,
    /// The scopes granted, when Google says (it does on every answer).
    pub scopes: Option<Vec<String>>,
}

impl From<&BasicTokenResponse> for Tokens {
    fn from(response: &BasicTokenResponse) -> Self {
        Tokens {
            access_token: response.access_token().secret().clone(),
            refresh_token: response.refresh_token().map(|t| t.secret().clone()),
            expires_in: response.expires_in(),
            scopes: response
                .scopes()
                .map(|scopes| scopes.iter().map(|s| s.to_string()).collect()),
        }
    }
}

/// A sign-in started in a browser: where to send it, and what to check
/// when it comes back.
#[derive(Debug)]
pub struct Authorization {
    pub url: String,
    pub state: String,
    verifier: PkceCodeVerifier,
    redirect: String,
}

/// The OAuth endpoints of one client.
#[derive(Debug, Clone)]
pub struct OAuth {
    http: reqwest::Client,
    endpoints: Endpoints,
    client: ClientCredentials,
}

impl OAuth {
    pub fn new(http: reqwest::Client, endpoints: Endpoints, client: ClientCredentials) -> Self {
        OAuth {
            http,
            endpoints,
            client,
        }
    }

    fn basic(&self) -> Result<Client, GoogleError> {
        let url = |what: &str, value: &str| {
            GoogleError::Invalid(format!("the Google {what} endpoint {value} is not a URL"))
        };
        let mut client = BasicClient::new(ClientId::new(self.client.id.clone()))
            .set_auth_type(AuthType::RequestBody)
            .set_auth_uri(
                AuthUrl::new(self.endpoints.auth.clone())
                    .map_err(|_| url("authorization", &self.endpoints.auth))?,
            )
            .set_token_uri(
                TokenUrl::new(self.endpoints.token.clone())
                    .map_err(|_| url("token", &self.endpoints.token))?,
            )
            .set_device_authorization_url(
                DeviceAuthorizationUrl::new(self.endpoints.device.clone())
                    .map_err(|_| url("device", &self.endpoints.device))?,
            );
        if let Some(secret) = &self.client.secret {
            client = client.set_client_secret(ClientSecret::new(secret.clone()));
        }
        Ok(client)
    }

    /// The consent page's address for `scopes`, coming back to `redirect`,
    /// with a fresh PKCE challenge (S256) and state. Asks for a refresh
    /// token (`access_type=offline`, `prompt=consent`).
    pub fn authorize(
        &self,
        redirect: &str,
        scopes: &[String],
        login_hint: Option<&str>,
    ) -> Result<Authorization, GoogleError> {
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let client = self.basic()?.set_redirect_uri(
            RedirectUrl::new(redirect.to_owned())
                .map_err(|_| GoogleError::Invalid(format!("{redirect} is not a URL")))?,
        );
        let mut request = client
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(challenge)
            .add_scopes(scopes.iter().map(|s| Scope::new(s.clone())))
            .add_extra_param("access_type", "offline")
            .add_extra_param("prompt", "consent")
            .add_extra_param("include_granted_scopes", "true");
        if let Some(hint) = login_hint {
            request = request.add_extra_param("login_hint", hint);
        }
        let (url, state) = request.url();
        Ok(Authorization {
            url: url.to_string(),
            state: state.secret().clone(),
            verifier,
            redirect: redirect.to_owned(),
        })
    }

    /// Trades the code a browser came back with for tokens.
    pub async fn exchange(
        &self,
        authorization: Authorization,
        code: &str,
    ) -> Result<Tokens, GoogleError> {
        let client = self.basic()?.set_redirect_uri(
            RedirectUrl::new(authorization.redirect.clone())
                .map_err(|_| GoogleError::Invalid("the redirect is not a URL".into()))?,
        );
        let http = self.adapter();
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(authorization.verifier)
            .request_async(&http)
            .await
            .map_err(|e| token_error("signing in", e))?;
        Ok(Tokens::from(&response))
    }

    /// A new access token from `refresh_token`.
    pub async fn refresh(&self, refresh_token: &str) -> Result<Tokens, GoogleError> {
        let client = self.basic()?;
        let http = self.adapter();
        let token = RefreshToken::new(refresh_token.to_owned());
        let response = client
            .exchange_refresh_token(&token)
            .request_async(&http)
            .await
            .map_err(|e| token_error("refreshing the token", e))?;
        Ok(Tokens::from(&response))
    }

    /// Starts the device flow: the code to show and where to enter it.
    /// Google refuses scopes outside [`DEVICE_FLOW_SCOPES`]; this says so
    /// before asking.
    pub async fn device_start(
        &self,
        scopes: &[String],
    ) -> Result<StandardDeviceAuthorizationResponse, GoogleError> {
        let refused: Vec<&str> = scopes
            .iter()
            .map(String::as_str)
            .filter(|s| !DEVICE_FLOW_SCOPES.contains(s))
            .collect();
        if !refused.is_empty() {
            return Err(GoogleError::Invalid(format!(
                "Google does not allow the device flow for {} (it allows it only for sign-in and Drive files Flynn creates); sign in with `flynn auth google login --no-browser` instead, which works on a machine without a browser",
                refused
                    .iter()
                    .map(|s| crate::scope_label(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let client = self.basic()?;
        let http = self.adapter();
        client
            .exchange_device_code()
            .add_scopes(scopes.iter().map(|s| Scope::new(s.clone())))
            .request_async(&http)
            .await
            .map_err(|e| token_error("starting the device sign-in", e))
    }

    /// Waits until the owner enters the code (polling as Google asks),
    /// then returns the tokens.
    pub async fn device_finish(
        &self,
        details: &StandardDeviceAuthorizationResponse,
    ) -> Result<Tokens, GoogleError> {
        let client = self.basic()?;
        let http = self.adapter();
        let response = client
            .exchange_device_access_token(details)
            .request_async(&http, tokio::time::sleep, None)
            .await
            .map_err(|e| token_error("waiting for the device sign-in", e))?;
        Ok(Tokens::from(&response))
    }

    /// Revokes `token` (a refresh token revokes its access tokens too):
    /// Google's `POST /revoke` with the token in the form. (By hand: the
    /// oauth2 crate refuses a revocation endpoint that is not HTTPS, which
    /// a local stand-in or proxy is.)
    pub async fn revoke(&self, token: &str) -> Result<(), GoogleError> {
        #[derive(Deserialize, Default)]
        struct Refusal {
            #[serde(default)]
            error: String,
            error_description: Option<String>,
        }
        let response = self
            .http
            .post(&self.endpoints.revoke)
            .form(&[("token", token)])
            .send()
            .await?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let refusal: Refusal = response.json().await.unwrap_or_default();
        Err(GoogleError::Api {
            status: status.as_u16(),
            message: refusal
                .error_description
                .unwrap_or_else(|| "Google refused to revoke the token".into()),
            reason: Some(refusal.error).filter(|e| !e.is_empty()),
        })
    }

    /// The email address of the account `access_token` belongs to.
    pub async fn email(&self, access_token: &str) -> Result<String, GoogleError> {
        #[derive(Deserialize)]
        struct UserInfo {
            email: Option<String>,
        }
        let response = self
            .http
            .get(&self.endpoints.userinfo)
            .bearer_auth(access_token)
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            return Err(GoogleError::Api {
                status: status.as_u16(),
                reason: None,
                message: format!(
                    "cannot read the account's address ({})",
                    response.text().await.unwrap_or_default().trim()
                ),
            });
        }
        let info: UserInfo = response.json().await?;
        info.email.ok_or_else(|| {
            GoogleError::Invalid("Google did not say which account signed in".into())
        })
    }

    /// The oauth2 crate's HTTP client: Flynn's reqwest client, which
    /// follows no redirects from the token endpoint (per the crate's
    /// advice).
    fn adapter(
        &self,
    ) -> impl Fn(
        oauth2::HttpRequest,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = Result<oauth2::HttpResponse, reqwest::Error>> + Send>,
    > + use<> {
        let http = self.http.clone();
        move |request: oauth2::HttpRequest| {
            let http = http.clone();
            Box::pin(async move {
                let request = reqwest::Request::try_from(request)?;
                let response = http.execute(request).await?;
                let mut out = oauth2::http::Response::builder().status(response.status());
                for (name, value) in response.headers() {
                    out = out.header(name, value);
                }
                let body = response.bytes().await?.to_vec();
                Ok(out
                    .body(body)
                    .unwrap_or_else(|_| oauth2::http::Response::new(Vec::new())))
            })
        }
    }
}

fn token_error<RE, T>(doing: &str, error: RequestTokenError<RE, T>) -> GoogleError
where
    RE: std::error::Error + 'static,
    T: oauth2::ErrorResponse + 'static,
{
    match error {
        RequestTokenError::ServerResponse(response) => {
            let json = serde_json::to_value(&response).unwrap_or_default();
            let code = json["error"].as_str().unwrap_or("error").to_owned();
            let description = json["error_description"].as_str().map(str::to_owned);
            GoogleError::Api {
                status: 400,
                message: match (&description, code.as_str()) {
                    (Some(d), _) => format!("{doing}: {d}"),
                    (None, "access_denied") => format!("{doing}: the sign-in was refused"),
                    (None, "expired_token") => {
                        format!("{doing}: the code expired before it was entered")
                    }
                    (None, "invalid_scope") => format!(
                        "{doing}: Google refused the scopes asked for (the device flow allows only a few)"
                    ),
                    (None, _) => format!("{doing}: Google refused"),
                },
                reason: Some(code),
            }
        }
        RequestTokenError::Request(e) => {
            GoogleError::Transport(format!("{doing}: cannot reach Google: {}", chain(&e)))
        }
        RequestTokenError::Parse(e, body) => GoogleError::Transport(format!(
            "{doing}: Google's answer is not readable ({e}): {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        )),
        RequestTokenError::Other(e) => GoogleError::Transport(format!("{doing}: {e}")),
    }
}

/// A one-shot listener on `127.0.0.1` for the browser's return.
#[derive(Debug)]
pub struct Loopback {
    listener: TcpListener,
    redirect: String,
}

impl Loopback {
    pub async fn bind() -> Result<Self, GoogleError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| GoogleError::Transport(format!("cannot listen on 127.0.0.1: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| GoogleError::Transport(e.to_string()))?
            .port();
        Ok(Loopback {
            listener,
            redirect: format!("http://127.0.0.1:{port}/"),
        })
    }

    /// The address Google sends the browser back to.
    pub fn redirect(&self) -> &str {
        &self.redirect
    }

    /// The code from the first request that carries the sign-in's answer
    /// (other requests, a favicon, are answered 404 and waited past).
    pub async fn code(&self, state: &str) -> Result<String, GoogleError> {
        loop {
            let (mut stream, _) =
                self.listener.accept().await.map_err(|e| {
                    GoogleError::Transport(format!("the sign-in listener failed: {e}"))
                })?;
            let mut buffer = vec![0_u8; 8192];
            let mut read = 0;
            while read < buffer.len() && !buffer[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
            let request = String::from_utf8_lossy(&buffer[..read]);
            let target = request
                .lines()
                .next()
                .and_then(|line| line.split_whitespace().nth(1))
                .unwrap_or("/");
            let answer = code_from_redirect(&format!("http://127.0.0.1{target}"), state);
            let (status, page) = match &answer {
                Ok(_) => ("200 OK", "Flynn is signed in. You can close this tab."),
                Err(Redirect::Unrelated) => ("404 Not Found", "Not found."),
                Err(Redirect::Failed(_)) => (
                    "400 Bad Request",
                    "The sign-in did not work; the terminal says why.",
                ),
            };
            let body =
                format!("<!doctype html><meta charset=utf-8><title>Flynn</title><p>{page}</p>");
            let _ = stream
                .write_all(
                    format!(
                        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
            let _ = stream.shutdown().await;
            match answer {
                Ok(code) => return Ok(code),
                Err(Redirect::Failed(error)) => return Err(error),
                Err(Redirect::Unrelated) => {}
            }
        }
    }
}

/// Why an address is not a sign-in's answer.
#[derive(Debug)]
pub enum Redirect {
    /// It carries neither a code nor an error (a favicon request).
    Unrelated,
    Failed(GoogleError),
}

/// The code in the address a browser came back to (or was left on, for a
/// pasted one), checked against the sign-in's `state`.
pub fn code_from_redirect(address: &str, state: &str) -> Result<String, Redirect> {
    let url = url::Url::parse(address.trim()).map_err(|_| {
        Redirect::Failed(GoogleError::Invalid(format!(
            "'{}' is not the address the browser ended on (it starts http://127.0.0.1:)",
            address.trim()
        )))
    })?;
    let param = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    if let Some(error) = param("error") {
        return Err(Redirect::Failed(GoogleError::Api {
            status: 400,
            message: if error == "access_denied" {
                "the sign-in was refused in the browser".to_owned()
            } else {
                format!("the sign-in failed in the browser ({error})")
            },
            reason: Some(error),
        }));
    }
    let Some(code) = param("code") else {
        return Err(Redirect::Unrelated);
    };
    if param("state").as_deref() != Some(state) {
        return Err(Redirect::Failed(GoogleError::Invalid(
            "the browser came back from another sign-in (its state does not match); start again"
                .into(),
        )));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pasted_address_gives_its_code_only_with_the_right_state() {
        let ok = code_from_redirect(
            "http://127.0.0.1:5000/?state=s1&code=4/abc&scope=email",
            "s1",
        );
        assert_eq!(ok.unwrap(), "4/abc");
        let wrong = code_from_redirect("http://127.0.0.1:5000/?state=s2&code=4/abc", "s1");
        assert!(matches!(wrong, Err(Redirect::Failed(_))));
        let denied =
            code_from_redirect("http://127.0.0.1:5000/?error=access_denied&state=s1", "s1");
        let Err(Redirect::Failed(error)) = denied else {
            panic!("a refusal is an error")
        };
        assert!(error.to_string().contains("refused"));
        assert!(matches!(
            code_from_redirect("http://127.0.0.1:5000/favicon.ico", "s1"),
            Err(Redirect::Unrelated)
        ));
        assert!(matches!(
            code_from_redirect("not an address", "s1"),
            Err(Redirect::Failed(_))
        ));
    }
}
