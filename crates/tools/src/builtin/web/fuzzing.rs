//! Entry points for `flynn-fuzz`: how `web.fetch` and `web.search` read
//! the pages they get. Not part of the API.

use super::{content, search};

/// A fetched body as `web.fetch` turns it into text: sniffed or typed by
/// `content_type`, decoded (`cut`: the body was truncated), and, for
/// HTML, reduced to its article. Gives the text.
pub fn read(body: &[u8], content_type: Option<&str>, cut: bool) -> String {
    let kind = content::from_header(content_type).unwrap_or_else(|| content::sniff(body));
    let html = matches!(kind, content::Kind::Html);
    content::decode(body, content_type, html, cut)
}

/// DuckDuckGo's HTML result page read as hits: (title, url, snippet).
pub fn duckduckgo(page: &str) -> Vec<(String, String, String)> {
    search::duckduckgo_hits(page)
        .into_iter()
        .map(|hit| (hit.title, hit.url, hit.snippet))
        .collect()
}

/// A snippet with its markup taken out.
pub fn plain(text: &str) -> String {
    search::plain(text)
}
