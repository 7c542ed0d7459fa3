//! `web.fetch`: a page's main content, fetched through the SSRF guard.

use std::error::Error as StdError;
use std::fmt::{self, Write as _};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::WebFetchConfig;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{Client, Response, Url, redirect};
use schemars::JsonSchema;
use serde::Deserialize;

use super::cache::Cache;
use super::content::{self, Kind};
use super::guard::{Guard, GuardedResolver, Refused};
use super::{Format, extract};
use crate::{ToolContext, ToolError, TypedTool};

/// Sent as `User-Agent`; some sites refuse requests without one.
const USER_AGENT: &str = concat!("Flynn/", env!("CARGO_PKG_VERSION"), " (web.fetch)");

/// Extra time the executor allows beyond the configured timeout, so the
/// tool's own, more helpful timeout message arrives first.
const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// `web.fetch`: fetches a URL and returns its readable content.
#[derive(Debug)]
pub struct WebFetch {
    /// Built on the first fetch (setting up TLS costs milliseconds every
    /// start-up would pay); `Err` holds why it could not be.
    client: OnceLock<Result<Client, String>>,
    max_redirects_for_client: u32,
    guard: Arc<Guard>,
    cache: Cache,
    timeout: Duration,
    max_bytes: usize,
    max_redirects: u32,
}

impl WebFetch {
    /// Configured by `tools.web_fetch`.
    pub fn new(config: &WebFetchConfig) -> Self {
        let guard = Arc::new(Guard::new(&config.allow_private));
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        WebFetch {
            client: OnceLock::new(),
            max_redirects_for_client: config.max_redirects,
            guard,
            cache: Cache::new(Duration::from_secs(config.cache_secs)),
            timeout,
            max_bytes: usize::try_from(config.max_bytes).unwrap_or(usize::MAX),
            max_redirects: config.max_redirects,
        }
    }
}

impl WebFetch {
    fn client(&self) -> Result<&Client, String> {
        self.client
            .get_or_init(|| {
                Client::builder()
                    .user_agent(USER_AGENT)
                    .timeout(self.timeout)
                    .redirect(redirect_policy(
                        Arc::clone(&self.guard),
                        self.max_redirects_for_client,
                    ))
                    .dns_resolver(Arc::new(GuardedResolver::new(Arc::clone(&self.guard))))
                    // A proxy would resolve names itself, out of the guard's sight.
                    .no_proxy()
                    .build()
                    .map_err(|error| format!("cannot set up the HTTP client: {}", chain(&error)))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Arguments of `web.fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchArgs {
    /// An http(s) URL.
    url: String,
    /// How to return HTML pages (default markdown).
    #[serde(default)]
    format: Option<Format>,
}

#[async_trait]
impl TypedTool for WebFetch {
    type Args = WebFetchArgs;

    fn name(&self) -> &str {
        "web.fetch"
    }

    fn description(&self) -> &str {
        "Fetch a URL and return its main content (markdown by default)."
    }

    fn timeout(&self) -> Duration {
        self.timeout + TIMEOUT_GRACE
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn parallel_safe(&self) -> bool {
        true
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: WebFetchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let format = args.format.unwrap_or_default();
        let url = Url::parse(args.url.trim()).map_err(|error| {
            ToolError::failed(format!(
                "'{}' is not a URL ({error}); give an absolute http:// or https:// URL",
                args.url
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::failed(format!(
                "cannot fetch {url}: only http and https URLs are supported"
            )));
        }
        if let Some(output) = self.cache.get(url.as_str(), format) {
            return Ok(output);
        }
        self.guard
            .check_url(&url)
            .map_err(|refused| ToolError::failed(refused.to_string()))?;
        let output = tokio::time::timeout(self.timeout, self.fetch(&url, format))
            .await
            .unwrap_or_else(|_| Err(self.timed_out(&url)))?;
        self.cache.put(url.as_str(), format, &output);
        Ok(output)
    }
}

impl WebFetch {
    async fn fetch(&self, url: &Url, format: Format) -> Result<String, ToolError> {
        let client = self.client().map_err(ToolError::failed)?;
        let mut response = client
            .get(url.clone())
            .header(
                ACCEPT,
                "text/html,application/xhtml+xml,application/json;q=0.9,text/*;q=0.8,*/*;q=0.5",
            )
            .send()
            .await
            .map_err(|error| self.request_error(url, &error))?;
        let final_url = response.url().clone();
        let status = response.status();
        if status.is_redirection() {
            // reqwest hands back a redirect it cannot follow, such as one
            // to another scheme.
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|value| value.to_str().ok());
            return Err(ToolError::failed(match location {
                Some(location) => format!(
                    "{final_url} redirected to {location}, which is not an http or https URL"
                ),
                None => format!("{final_url} answered HTTP {status} with no URL to follow"),
            }));
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let declared = content::from_header(content_type.as_deref());
        if let Some(Kind::Binary(media)) = &declared {
            return Err(ToolError::failed(format!(
                "{final_url} is {media}, which web.fetch cannot read (it reads HTML, JSON and \
                 text); look for an HTML or text version of it"
            )));
        }
        let (body, cut) = self
            .read_capped(&mut response)
            .await
            .map_err(|error| self.request_error(&final_url, &error))?;
        let kind = declared.unwrap_or_else(|| content::sniff(&body));
        if let Kind::Binary(media) = &kind {
            return Err(ToolError::failed(format!(
                "{final_url} looks like binary data ({media}), which web.fetch cannot read \
                 (it reads HTML, JSON and text)"
            )));
        }
        // Parsing a large page takes milliseconds of CPU: off the runtime.
        let page_url = final_url.to_string();
        let (title, content) = tokio::task::spawn_blocking(move || {
            let text = content::decode(&body, content_type.as_deref(), kind == Kind::Html, cut);
            render(kind, text, &page_url, format)
        })
        .await
        .map_err(|error| {
            ToolError::failed(format!(
                "reading the page at {final_url} failed ({error}); try format \"html\""
            ))
        })?;
        if !status.is_success() {
            // The page's words go to the model as untrusted content: an
            // error page can carry orders as well as any other.
            let excerpt: String = content.chars().take(500).collect();
            let message = format!("{final_url} answered HTTP {status}");
            return Err(match excerpt.trim() {
                "" => ToolError::failed(message),
                said => ToolError::quoting(message, said),
            });
        }
        let mut output = format!("URL: {final_url}\n");
        if let Some(title) = title {
            let _ = writeln!(output, "Title: {title}");
        }
        if cut {
            let _ = writeln!(
                output,
                "Note: only the first {} bytes were read (tools.web_fetch.max_bytes); the rest is missing.",
                self.max_bytes
            );
        }
        output.push('\n');
        output.push_str(&content);
        Ok(output)
    }

    /// Reads at most `max_bytes` of the body, and says whether there was
    /// more. The rest is never read: the connection is dropped.
    async fn read_capped(
        &self,
        response: &mut Response,
    ) -> Result<(Vec<u8>, bool), reqwest::Error> {
        let announced = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<usize>().ok())
            .unwrap_or(0);
        // A Content-Length may lie; it only sizes the first allocation.
        let mut body = Vec::with_capacity(announced.min(self.max_bytes).min(1 << 20));
        while let Some(chunk) = response.chunk().await? {
            let room = self.max_bytes - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                return Ok((body, true));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, false))
    }

    fn timed_out(&self, url: &Url) -> ToolError {
        ToolError::failed(format!(
            "fetching {url} timed out after {}s (tools.web_fetch.timeout_secs); the server is \
             slow or not answering: try again later or use another source",
            self.timeout.as_secs()
        ))
    }

    /// Turns a reqwest failure into what the model needs to know: the
    /// guard's refusal, the redirect limit, a timeout, or the cause.
    fn request_error(&self, url: &Url, error: &reqwest::Error) -> ToolError {
        if let Some(refused) = find_source::<Refused>(error) {
            return ToolError::failed(refused.to_string());
        }
        if find_source::<TooManyRedirects>(error).is_some() {
            return ToolError::failed(format!(
                "{url} redirected more than {} times (tools.web_fetch.max_redirects); fetch \
                 the final URL directly if you know it",
                self.max_redirects
            ));
        }
        if error.is_timeout() {
            return self.timed_out(url);
        }
        let host = url.host_str().unwrap_or_default();
        if error.is_connect() {
            return ToolError::failed(format!(
                "cannot connect to {host}: {}; check the URL, or try again later",
                chain(error)
            ));
        }
        ToolError::failed(format!("fetching {url} failed: {}", chain(error)))
    }
}

/// The title (for HTML) and the content to return.
fn render(kind: Kind, text: String, url: &str, format: Format) -> (Option<String>, String) {
    match kind {
        Kind::Html => {
            let page = extract(&text, url, format);
            (page.title, page.content)
        }
        Kind::Json => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(value) => (None, serde_json::to_string_pretty(&value).unwrap_or(text)),
            Err(_) => (None, text),
        },
        Kind::Text | Kind::Binary(_) => (None, text),
    }
}

/// Follows at most `max` redirects, never to an IP literal the guard
/// refuses (names are checked when they resolve). Redirects to other
/// schemes never reach a policy: reqwest returns them unfollowed.
fn redirect_policy(guard: Arc<Guard>, max: u32) -> redirect::Policy {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    redirect::Policy::custom(move |attempt| {
        // `previous` starts with the original URL.
        if attempt.previous().len() > max {
            return attempt.error(TooManyRedirects);
        }
        match guard.check_url(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => attempt.error(refused),
        }
    })
}

/// The redirect policy gave up.
#[derive(Debug)]
struct TooManyRedirects;

impl fmt::Display for TooManyRedirects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("too many redirects")
    }
}

impl StdError for TooManyRedirects {}

fn find_source<'a, T: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// An error and its causes, `: `-separated, each said once.
pub(crate) fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(error) = current {
        let text = error.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        current = error.source();
    }
    parts.join(": ")
}
