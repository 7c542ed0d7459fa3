//! HTML → the readable part of a page, as markdown or text.

use dom_query::{Document, Matcher};
use dom_smoothie::{Config, Readability, TextMode};
use schemars::JsonSchema;
use serde::Deserialize;

/// What `web.fetch` returns for an HTML page: the main content as
/// markdown (the default) or plain text, or the page's HTML as served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
// Inlined, without per-variant docs, the schema is one short `enum`.
#[schemars(inline)]
pub enum Format {
    #[default]
    Markdown,
    Text,
    Html,
}

/// A page reduced to what a reader wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// The article's title, when the page has one.
    pub title: Option<String>,
    pub content: String,
}

/// Elements that are never content, dropped when readability finds no
/// article and the whole body is converted.
const CHROME: &str = "script, style, noscript, template, nav, header, footer, aside, form, \
                      iframe, svg, button, [role=navigation], [aria-hidden=true]";

/// Reduces `html`, fetched from `url`, to its main content: readability
/// extraction (as Mozilla's Readability does it), then markdown or text.
/// `Format::Html` returns the page unchanged. A page without a
/// recognisable article is converted whole, minus navigation and scripts.
pub fn extract(html: &str, url: &str, format: Format) -> Extracted {
    let text_mode = match format {
        Format::Html => {
            return Extracted {
                title: None,
                content: html.to_owned(),
            };
        }
        Format::Markdown => TextMode::Markdown,
        Format::Text => TextMode::Formatted,
    };
    let config = || Config {
        text_mode,
        ..Config::default()
    };
    // A URL readability cannot use only costs the resolution of relative
    // links, so it is dropped rather than failing the page.
    let readability = Readability::new(html, Some(url), Some(config()))
        .or_else(|_| Readability::new(html, None, Some(config())));
    let article = readability.and_then(|mut r| r.parse());
    match article {
        Ok(article) if !article.text_content.trim().is_empty() => Extracted {
            title: non_empty(&article.title),
            content: tidy(&article.text_content),
        },
        _ => whole_page(html, format),
    }
}

/// The body without its chrome, for pages readability gives up on.
fn whole_page(html: &str, format: Format) -> Extracted {
    let doc = Document::from(html);
    let title = Matcher::new("title")
        .ok()
        .and_then(|m| doc.select_matcher(&m).iter().next().map(|t| t.text()))
        .and_then(|t| non_empty(&t));
    if let Ok(chrome) = Matcher::new(CHROME) {
        doc.select_matcher(&chrome).remove();
    }
    let body = Matcher::new("body")
        .ok()
        .and_then(|m| doc.select_matcher(&m).nodes().first().copied());
    let root = body.unwrap_or_else(|| doc.root());
    let content = match format {
        Format::Text => root.formatted_text(),
        _ => root.md(None),
    };
    Extracted {
        title,
        content: tidy(&content),
    }
}

fn non_empty(text: &str) -> Option<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// Drops leading and trailing blank lines and trailing spaces, and
/// collapses runs of blank lines to one.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    let lines = text.lines().skip_while(|line| line.trim().is_empty());
    for line in lines {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_readability_gives_up_on_is_converted_whole_without_chrome() {
        let html = "<html><head><title> Tiny </title><style>p{}</style></head><body>\
                    <nav><a href=/>Home</a></nav><p>Just <b>one</b> line.</p>\
                    <script>alert(1)</script></body></html>";
        assert_eq!(
            whole_page(html, Format::Markdown),
            Extracted {
                title: Some("Tiny".into()),
                content: "Just **one** line.".into()
            }
        );
        assert_eq!(
            whole_page(html, Format::Text),
            Extracted {
                title: Some("Tiny".into()),
                content: "Just one line.".into()
            }
        );
        // An empty body has no article; a URL readability cannot use is
        // ignored.
        assert_eq!(
            extract("<title>Empty</title>", "not a url", Format::Markdown),
            Extracted {
                title: Some("Empty".into()),
                content: String::new()
            }
        );
    }

    #[test]
    fn html_is_returned_as_served() {
        let html = "<p>x</p>";
        assert_eq!(
            extract(html, "http://example.com/", Format::Html),
            Extracted {
                title: None,
                content: html.into()
            }
        );
    }

    #[test]
    fn blank_runs_collapse() {
        assert_eq!(tidy("\n a  \n\n\n\nb\n\n"), " a\n\nb");
    }
}
