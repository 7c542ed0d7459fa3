//! The HTTP plumbing the embedders share: a client with a timeout that
//! follows no redirect (API keys stay with the configured host), and one
//! request turned into a typed answer or a typed error.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::embed::EmbedError;

pub(crate) fn client(
    service: &'static str,
    timeout: Duration,
) -> Result<reqwest::Client, EmbedError> {
    reqwest::Client::builder()
        // reqwest drops `Authorization` on a redirect to another host, but
        // not `x-goog-api-key`: a redirect is an error instead.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|e| EmbedError::Transport {
            service,
            message: format!("cannot build an HTTP client: {e}"),
        })
}

/// Sends `request`; a non-2xx answer becomes [`EmbedError::Status`] with
/// the service's own message when it gave one.
pub(crate) async fn send<T: DeserializeOwned>(
    service: &'static str,
    request: reqwest::RequestBuilder,
) -> Result<T, EmbedError> {
    let response = request.send().await.map_err(|e| EmbedError::Transport {
        service,
        message: describe(&e),
    })?;
    let status = response.status();
    if status.is_redirection() {
        return Err(EmbedError::Redirect {
            service,
            status: status.as_u16(),
            to: redirect_target(&response),
        });
    }
    let body = response.bytes().await.map_err(|e| EmbedError::Transport {
        service,
        message: describe(&e),
    })?;
    if !status.is_success() {
        return Err(EmbedError::Status {
            service,
            status: status.as_u16(),
            message: error_message(&body),
        });
    }
    serde_json::from_slice(&body).map_err(|e| EmbedError::Decode {
        service,
        message: e.to_string(),
    })
}

/// Where a redirect pointed: `host[:port]`, else the `Location` as sent.
fn redirect_target(response: &reqwest::Response) -> String {
    let Some(location) = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
    else {
        return "nowhere (no Location header)".to_owned();
    };
    match response.url().join(location) {
        Ok(url) => match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => location.chars().take(300).collect(),
        },
        Err(_) => location.chars().take(300).collect(),
    }
}

fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        format!("cannot connect: {error}")
    } else {
        error.to_string()
    }
}

/// `error.message` (OpenAI, Gemini), `error` as a string (Ollama),
/// `detail` (Voyage), else the start of the body.
fn error_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("detail"))
            .and_then(|v| v.as_str());
        if let Some(message) = found {
            return message.to_owned();
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(300) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
