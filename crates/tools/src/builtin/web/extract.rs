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
    // Readability and the markdown writer recurse per level of nesting
    // (and copy a quote's text once per level), so a hostile page of
    // 100,000 nested elements would overflow the stack or take minutes.
    // Such a page is reduced to its text without building a tree.
    if nesting_depth(html) > MAX_DEPTH {
        return flat_text(html);
    }
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

/// How deep a page may nest elements before it is read as flat text.
/// Real pages stay well under 100 levels; 256 keeps extraction within a
/// blocking thread's 2 MiB stack with room to spare.
const MAX_DEPTH: usize = 256;

/// Elements that close themselves or are closed by their next sibling
/// (`<p>`, `<li>` and such, written without their end tag), so they do
/// not nest however many a page opens.
const FLAT: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead",
    "tbody", "tfoot", "rb", "rt", "rp", "colgroup", "caption", "!doctype",
];

/// Elements whose text is not page text.
const RAW: &[&str] = &[
    "script", "style", "template", "noscript", "textarea", "title",
];

/// The deepest nesting of elements in `html`, counted from its tags in
/// one pass without building a tree (an estimate: tags a parser would
/// close implicitly, other than [`FLAT`]'s, count as still open).
fn nesting_depth(html: &str) -> usize {
    let mut depth: usize = 0;
    let mut deepest = 0;
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix("!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let closing = rest.starts_with('/');
        let name = tag_name(rest.trim_start_matches('/'));
        if name.is_empty() {
            continue;
        }
        let end = rest.find('>').map_or(rest.len(), |i| i + 1);
        let self_closing = rest[..end].ends_with("/>");
        rest = &rest[end..];
        if closing {
            depth = depth.saturating_sub(1);
        } else if RAW.contains(&name.as_str()) {
            rest = skip_raw(rest, &name);
        } else if !self_closing && !FLAT.contains(&name.as_str()) {
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// The lowercased tag name at the start of `text` (after `<` or `</`).
fn tag_name(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '!' | '-' | ':'))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// `text` after the end tag of the raw-text element `name` (the script or
/// style whose start tag it follows), or nothing when it never ends.
fn skip_raw<'a>(text: &'a str, name: &str) -> &'a str {
    let close = format!("</{name}");
    let lower = text.to_ascii_lowercase();
    match lower.find(&close) {
        Some(at) => {
            let after = &text[at..];
            after.find('>').map_or("", |end| &after[end + 1..])
        }
        None => "",
    }
}

/// A page too deeply nested to parse safely, as its text: tags dropped,
/// scripts and styles skipped, the common entities decoded, a line break
/// for each block-level tag.
fn flat_text(html: &str) -> Extracted {
    let mut text = String::with_capacity(html.len().min(1 << 20));
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        push_decoded(&mut text, &rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix("!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let name = tag_name(rest.trim_start_matches('/'));
        let closing = rest.starts_with('/');
        let end = rest.find('>').map_or(rest.len(), |i| i + 1);
        rest = &rest[end..];
        if !closing && RAW.contains(&name.as_str()) {
            rest = skip_raw(rest, &name);
        } else if matches!(
            name.as_str(),
            "p" | "div"
                | "br"
                | "li"
                | "tr"
                | "h1"
                | "h2"
                | "h3"
                | "h4"
                | "h5"
                | "h6"
                | "blockquote"
                | "pre"
                | "section"
                | "article"
                | "table"
                | "ul"
                | "ol"
        ) && !text.ends_with('\n')
        {
            text.push('\n');
        }
    }
    push_decoded(&mut text, rest);
    Extracted {
        title: None,
        content: tidy(&text),
    }
}

/// Appends `raw` with the entities pages use most decoded.
fn push_decoded(out: &mut String, raw: &str) {
    let mut rest = raw;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let entity = rest
            .find(';')
            .filter(|&end| end <= 10)
            .map(|end| &rest[1..end]);
        let decoded = entity.and_then(|name| match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some(' '),
            _ => name
                .strip_prefix("#x")
                .or_else(|| name.strip_prefix("#X"))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| name.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                .and_then(char::from_u32),
        });
        match (decoded, entity) {
            (Some(c), Some(name)) => {
                out.push(c);
                rest = &rest[name.len() + 2..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
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

    /// Runs `extract` as `web.fetch` does, on a blocking thread with the
    /// 2 MiB stack tokio gives them, and says how long it took.
    fn on_small_stack(html: String, format: Format) -> (Extracted, std::time::Duration) {
        let thread = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let start = std::time::Instant::now();
                let page = extract(&html, "https://e.x/", format);
                (page, start.elapsed())
            });
        match thread.map(std::thread::JoinHandle::join) {
            Ok(Ok(done)) => done,
            _ => panic!("extraction failed"),
        }
    }

    #[test]
    fn deeply_nested_pages_are_flattened_quickly_not_a_stack_overflow() {
        for tag in ["blockquote", "div", "em", "a", "ul", "span", "table"] {
            for format in [Format::Markdown, Format::Text] {
                let html = format!("{}deep text", format!("<{tag}>").repeat(100_000));
                let (page, took) = on_small_stack(html, format);
                assert!(page.content.contains("deep text"), "{tag}: {page:?}");
                assert!(took < std::time::Duration::from_secs(2), "{tag}: {took:?}");
            }
        }
    }

    #[test]
    fn pages_nested_as_deep_as_real_ones_keep_their_markdown() {
        let html = format!(
            "<body>{}<blockquote><p>Quoted <b>bold</b> text.</p></blockquote>{}</body>",
            "<div>".repeat(100),
            "</div>".repeat(100)
        );
        let (page, _) = on_small_stack(html, Format::Markdown);
        assert_eq!(page.content, "> Quoted **bold** text.");
        // Just under the limit, the whole path (readability, then the
        // markdown writer) still fits a blocking thread's stack.
        for tag in ["blockquote", "div", "em", "ul"] {
            let depth = MAX_DEPTH - 2;
            let html = format!(
                "<body>{}<p>deep</p>{}</body>",
                format!("<{tag}>").repeat(depth),
                format!("</{tag}>").repeat(depth)
            );
            assert_eq!(nesting_depth(&html), depth + 1);
            let (page, _) = on_small_stack(html, Format::Markdown);
            assert!(page.content.contains("deep"), "{tag}");
        }
        // Hundreds of unclosed paragraphs and items are not nesting.
        let html = format!("<body><ul>{}</ul></body>", "<li><p>item".repeat(2000));
        let (page, _) = on_small_stack(html, Format::Markdown);
        assert!(
            page.content.starts_with("- item"),
            "{}",
            &page.content[..40]
        );
    }

    #[test]
    fn blank_runs_collapse() {
        assert_eq!(tidy("\n a  \n\n\n\nb\n\n"), " a\n\nb");
    }
}
