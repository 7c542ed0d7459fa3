//! `web.search`: titles, URLs and snippets from the configured engine.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use dom_query::{Document, Matcher};
use flynn_protocol::ToolEffect;
use flynn_protocol::config::{SearchProvider, WebSearchConfig};
use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::{Client, RequestBuilder, Url};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::fetch::chain;
use crate::{ToolContext, ToolError, TypedTool};

/// The most results one search returns.
const MAX_COUNT: u32 = 20;

/// Extra time the executor allows beyond the configured timeout, so the
/// tool's own timeout message arrives first.
const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

const BRAVE_ENDPOINT: &str = "https://api.search.brave.com";
const TAVILY_ENDPOINT: &str = "https://api.tavily.com";
const DUCKDUCKGO_ENDPOINT: &str = "https://html.duckduckgo.com";

/// `web.search`: searches the web with the engine `tools.web_search` names.
#[derive(Debug)]
pub struct WebSearch {
    /// Built on the first search (setting up TLS costs milliseconds every
    /// start-up would pay); `Err` holds why it could not be.
    client: OnceLock<Result<Client, String>>,
    provider: SearchProvider,
    api_key: Option<String>,
    endpoint: Option<String>,
    max_results: u32,
    timeout: Duration,
}

impl WebSearch {
    /// Configured by `tools.web_search`.
    pub fn new(config: &WebSearchConfig) -> Self {
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        WebSearch {
            client: OnceLock::new(),
            provider: config.provider,
            api_key: config
                .api_key
                .as_deref()
                .map(str::trim)
                .filter(|key| !key.is_empty())
                .map(str::to_owned),
            endpoint: config
                .endpoint
                .as_deref()
                .map(|e| e.trim().trim_end_matches('/').to_owned())
                .filter(|e| !e.is_empty()),
            max_results: config.max_results.clamp(1, MAX_COUNT),
            timeout,
        }
    }
}

/// Arguments of `web.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchArgs {
    /// What to search for.
    query: String,
    /// Number of results (at most 20).
    count: Option<u32>,
}

/// One result, whatever the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hit {
    pub(super) title: String,
    pub(super) url: String,
    pub(super) snippet: String,
}

#[async_trait]
impl TypedTool for WebSearch {
    type Args = WebSearchArgs;

    fn name(&self) -> &str {
        "web.search"
    }

    fn description(&self) -> &str {
        "Search the web; returns titles, URLs and snippets."
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

    async fn run(&self, args: WebSearchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let query = args.query.trim();
        if query.is_empty() {
            return Err(ToolError::failed(
                "the query is empty; say what to search for",
            ));
        }
        let count = args.count.unwrap_or(self.max_results).clamp(1, MAX_COUNT);
        let client = self
            .client
            .get_or_init(|| {
                let mut builder = Client::builder()
                    .user_agent(concat!("Flynn/", env!("CARGO_PKG_VERSION")))
                    .timeout(self.timeout);
                if self.sends_key() {
                    // reqwest drops `Authorization` on a redirect to
                    // another host, but not `X-Subscription-Token`: an
                    // engine with a key follows no redirect (see `send`).
                    builder = builder.redirect(reqwest::redirect::Policy::none());
                }
                builder
                    .build()
                    .map_err(|error| format!("cannot set up the HTTP client: {}", chain(&error)))
            })
            .as_ref()
            .map_err(|message| ToolError::failed(message.clone()))?;
        let search = async {
            match self.provider {
                SearchProvider::Brave => self.brave(client, query, count).await,
                SearchProvider::Searxng => self.searxng(client, query).await,
                SearchProvider::Tavily => self.tavily(client, query, count).await,
                SearchProvider::Duckduckgo => self.duckduckgo(client, query).await,
            }
        };
        let mut hits = tokio::time::timeout(self.timeout, search)
            .await
            .unwrap_or_else(|_| Err(self.timed_out()))?;
        hits.truncate(usize::try_from(count).unwrap_or(usize::MAX));
        Ok(format_hits(query, &hits))
    }
}

impl WebSearch {
    fn backend(&self) -> &'static str {
        match self.provider {
            SearchProvider::Brave => "Brave",
            SearchProvider::Searxng => "SearXNG",
            SearchProvider::Tavily => "Tavily",
            SearchProvider::Duckduckgo => "DuckDuckGo",
        }
    }

    /// Whether requests carry the API key (Brave, Tavily).
    fn sends_key(&self) -> bool {
        matches!(
            self.provider,
            SearchProvider::Brave | SearchProvider::Tavily
        )
    }

    fn key(&self) -> Result<&str, ToolError> {
        self.api_key.as_deref().ok_or_else(|| {
            ToolError::failed(format!(
                "{} search needs an API key: set tools.web_search.api_key in the config",
                self.backend()
            ))
        })
    }

    fn url(&self, default: &str, path: &str) -> Result<Url, ToolError> {
        let base = self.endpoint.as_deref().unwrap_or(default);
        Url::parse(&format!("{base}{path}")).map_err(|error| {
            ToolError::failed(format!(
                "tools.web_search.endpoint '{base}' is not a valid URL ({error}); fix it in the config"
            ))
        })
    }

    fn timed_out(&self) -> ToolError {
        ToolError::failed(format!(
            "{} search timed out after {}s (tools.web_search.timeout_secs); try again later",
            self.backend(),
            self.timeout.as_secs()
        ))
    }

    async fn brave(&self, client: &Client, query: &str, count: u32) -> Result<Vec<Hit>, ToolError> {
        let key = self.key()?;
        let url = self.url(BRAVE_ENDPOINT, "/res/v1/web/search")?;
        let request = client
            .get(url)
            .query(&[("q", query), ("count", &count.to_string())])
            .header(ACCEPT, "application/json")
            .header("X-Subscription-Token", key);
        let body: Value = self.send_json(request).await?;
        Ok(json_hits(&body["web"]["results"], "description"))
    }

    async fn searxng(&self, client: &Client, query: &str) -> Result<Vec<Hit>, ToolError> {
        if self.endpoint.is_none() {
            return Err(ToolError::failed(
                "SearXNG search needs the URL of your instance: set tools.web_search.endpoint \
                 (e.g. http://searxng:8080) in the config",
            ));
        }
        let url = self.url("", "/search")?;
        let request = client
            .get(url)
            .query(&[("q", query), ("format", "json")])
            .header(ACCEPT, "application/json");
        let body: Value = self.send_json(request).await?;
        Ok(json_hits(&body["results"], "content"))
    }

    async fn tavily(
        &self,
        client: &Client,
        query: &str,
        count: u32,
    ) -> Result<Vec<Hit>, ToolError> {
        let key = self.key()?;
        let url = self.url(TAVILY_ENDPOINT, "/search")?;
        let request = client
            .post(url)
            .header(AUTHORIZATION, format!("Bearer {key}"))
            .json(&json!({"query": query, "max_results": count}));
        let body: Value = self.send_json(request).await?;
        Ok(json_hits(&body["results"], "content"))
    }

    async fn duckduckgo(&self, client: &Client, query: &str) -> Result<Vec<Hit>, ToolError> {
        let url = self.url(DUCKDUCKGO_ENDPOINT, "/html/")?;
        let request = client.post(url).form(&[("q", query)]);
        let response = self.send(request).await?;
        let status = response.status();
        let page = response.text().await.map_err(|e| self.transport(&e))?;
        let hits = duckduckgo_hits(&page);
        // DuckDuckGo answers a bot check with 202 and a page of no results.
        if hits.is_empty() && (status.as_u16() == 202 || page.contains("anomaly")) {
            return Err(ToolError::failed(
                "DuckDuckGo refused the search with a bot check (too many searches); try again \
                 later, or configure another engine in tools.web_search.provider",
            ));
        }
        Ok(hits)
    }

    /// Sends the request; an HTTP error status becomes an error naming the
    /// engine and status, with the start of its body.
    async fn send(&self, request: RequestBuilder) -> Result<reqwest::Response, ToolError> {
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        // Only an engine with a key stops at redirects (see the client).
        if status.is_redirection() && self.sends_key() {
            let to = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|location| response.url().join(location).ok())
                .and_then(|url| {
                    url.host_str().map(|host| match url.port() {
                        Some(port) => format!("{host}:{port}"),
                        None => host.to_owned(),
                    })
                })
                .unwrap_or_else(|| "an unnamed place".to_owned());
            return Err(ToolError::failed(format!(
                "{} search answered with a redirect (HTTP {}) to {to}; API keys are not sent \
                 across redirects: check tools.web_search.endpoint",
                self.backend(),
                status.as_u16()
            )));
        }
        let body = response.text().await.unwrap_or_default();
        let detail: String = self.redact(body.trim()).chars().take(300).collect();
        let hint = match (status.as_u16(), self.provider) {
            (401 | 403 | 422, SearchProvider::Brave | SearchProvider::Tavily) => {
                "; check tools.web_search.api_key"
            }
            (403, SearchProvider::Searxng) => {
                "; enable the json format in the instance's settings.yml (search.formats)"
            }
            (429, _) => "; rate limited, try again later",
            _ => "",
        };
        // The engine's own words are quoted as untrusted: a search
        // instance is somebody else's server.
        let message = format!("{} search failed: HTTP {status}{hint}", self.backend());
        Err(if detail.is_empty() {
            ToolError::failed(message)
        } else {
            ToolError::quoting(message, detail)
        })
    }

    async fn send_json(&self, request: RequestBuilder) -> Result<Value, ToolError> {
        let response = self.send(request).await?;
        let text = response.text().await.map_err(|e| self.transport(&e))?;
        serde_json::from_str(&text).map_err(|error| {
            ToolError::failed(format!(
                "{} search answered with something other than JSON ({error}); check \
                 tools.web_search.endpoint",
                self.backend()
            ))
        })
    }

    fn transport(&self, error: &reqwest::Error) -> ToolError {
        if error.is_timeout() {
            return self.timed_out();
        }
        ToolError::failed(format!(
            "{} search failed: {}",
            self.backend(),
            self.redact(&chain(error))
        ))
    }

    /// Removes the API key from text that goes to the model.
    fn redact(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => text.replace(key.as_str(), "[api key]"),
            None => text.to_owned(),
        }
    }
}

/// Results from a JSON array of `{title, url, <snippet field>}` objects.
fn json_hits(results: &Value, snippet: &str) -> Vec<Hit> {
    let text = |item: &Value, field: &str| {
        item.get(field)
            .and_then(Value::as_str)
            .map(plain)
            .unwrap_or_default()
    };
    results
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| Hit {
            title: text(item, "title"),
            url: item
                .get("url")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            snippet: text(item, snippet),
        })
        .filter(|hit| !hit.url.is_empty())
        .collect()
}

/// Results from DuckDuckGo's HTML page, ads left out.
pub(super) fn duckduckgo_hits(page: &str) -> Vec<Hit> {
    let doc = Document::from(page);
    let (Ok(result), Ok(link), Ok(snippet)) = (
        Matcher::new(".result:not(.result--ad)"),
        Matcher::new("a.result__a"),
        Matcher::new(".result__snippet"),
    ) else {
        return Vec::new();
    };
    doc.select_matcher(&result)
        .iter()
        .filter_map(|block| {
            let anchor = block.select_matcher(&link);
            let href = anchor.attr("href")?;
            let url = unwrap_redirect(&href)?;
            Some(Hit {
                title: squash(&anchor.text()),
                url,
                snippet: squash(&block.select_matcher(&snippet).text()),
            })
        })
        .collect()
}

/// The target of a `//duckduckgo.com/l/?uddg=<url>` link, or the link.
fn unwrap_redirect(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_owned()
    };
    let url = Url::parse(&absolute).ok()?;
    let is_redirect = url
        .host_str()
        .is_some_and(|host| host.ends_with("duckduckgo.com"))
        && url.path() == "/l/";
    if is_redirect {
        url.query_pairs()
            .find(|(name, _)| name == "uddg")
            .map(|(_, target)| target.into_owned())
    } else {
        Some(url.to_string())
    }
}

/// Text without the markup some engines put in snippets (`<strong>`), with
/// the common entities decoded and whitespace collapsed.
pub(super) fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let tag = &rest[at + 1..];
        let is_tag = tag
            .trim_start_matches('/')
            .starts_with(|c: char| c.is_ascii_alphabetic());
        match tag.find('>') {
            Some(end) if is_tag => rest = &tag[end + 1..],
            _ => {
                out.push('<');
                rest = tag;
            }
        }
    }
    out.push_str(rest);
    let decoded = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    squash(&decoded)
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `1. **Title** — url` and the snippet indented below, one per result.
fn format_hits(query: &str, hits: &[Hit]) -> String {
    if hits.is_empty() {
        return format!("No results for \"{query}\".");
    }
    let mut out = String::new();
    for (i, hit) in hits.iter().enumerate() {
        let title = if hit.title.is_empty() {
            hit.url.as_str()
        } else {
            hit.title.as_str()
        };
        let _ = writeln!(out, "{}. **{title}** — {}", i + 1, hit.url);
        if !hit.snippet.is_empty() {
            let _ = writeln!(out, "   {}", hit.snippet);
        }
    }
    out.truncate(out.trim_end().len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_lose_their_markup() {
        assert_eq!(
            plain("The <strong>Rust</strong> &amp; a < b,\n  <em>fast</em>"),
            "The Rust & a < b, fast"
        );
    }

    #[test]
    fn duckduckgo_redirects_are_unwrapped() {
        assert_eq!(
            unwrap_redirect("//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.com%2Fa%3Fb%3D1&rut=x"),
            Some("https://example.com/a?b=1".to_owned())
        );
        assert_eq!(
            unwrap_redirect("https://example.com/direct"),
            Some("https://example.com/direct".to_owned())
        );
        assert_eq!(unwrap_redirect("not a url"), None);
    }

    #[test]
    fn results_are_a_numbered_markdown_list() {
        let hits = [
            Hit {
                title: "Rust".into(),
                url: "https://www.rust-lang.org/".into(),
                snippet: "A language.".into(),
            },
            Hit {
                title: String::new(),
                url: "https://example.com/".into(),
                snippet: String::new(),
            },
        ];
        assert_eq!(
            format_hits("rust", &hits),
            "1. **Rust** — https://www.rust-lang.org/\n   A language.\n\
             2. **https://example.com/** — https://example.com/"
        );
        assert_eq!(format_hits("zzz", &[]), "No results for \"zzz\".");
    }
}
