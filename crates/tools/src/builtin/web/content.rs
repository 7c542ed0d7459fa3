//! What a response body is (HTML, JSON, text, or something unreadable),
//! and how its bytes become text.

use encoding_rs::{Encoding, UTF_8};

/// The kinds of body `web.fetch` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Html,
    Json,
    Text,
    /// Not text; carries the media type to name in the refusal.
    Binary(String),
}

/// The media type without parameters, in lower case:
/// `Text/HTML; charset=x` → `text/html`.
pub(crate) fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// What the Content-Type says the body is; `None` when it says nothing
/// useful (missing, or `application/octet-stream`) and the body must be
/// sniffed.
pub(crate) fn from_header(content_type: Option<&str>) -> Option<Kind> {
    let essence = essence(content_type?);
    let (top, sub) = essence.split_once('/')?;
    let kind = match (top, sub) {
        ("text", "html") | ("application", "xhtml+xml") => Kind::Html,
        ("application" | "text", "json") => Kind::Json,
        (_, sub) if sub.ends_with("+json") => Kind::Json,
        ("application", "octet-stream" | "unknown") => return None,
        ("text", _) => Kind::Text,
        (_, sub) if sub.ends_with("+xml") => Kind::Text,
        (
            "application",
            "xml"
            | "javascript"
            | "x-javascript"
            | "ecmascript"
            | "x-sh"
            | "yaml"
            | "x-yaml"
            | "toml"
            | "sql"
            | "graphql"
            | "x-ndjson"
            | "jsonl"
            | "x-www-form-urlencoded"
            | "x-tex"
            | "x-httpd-php",
        ) => Kind::Text,
        _ => Kind::Binary(essence),
    };
    Some(kind)
}

/// What an untyped body looks like from its first bytes.
pub(crate) fn sniff(body: &[u8]) -> Kind {
    let head = &body[..body.len().min(1024)];
    if head.contains(&0) {
        return Kind::Binary("application/octet-stream".to_owned());
    }
    let start = String::from_utf8_lossy(head);
    let start = start
        .trim_start_matches('\u{feff}')
        .trim_start()
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        Kind::Html
    } else if start.starts_with('{') || start.starts_with('[') {
        Kind::Json
    } else {
        Kind::Text
    }
}

/// Decodes `body` by the charset of its Content-Type, else (for HTML) its
/// `<meta charset>`, else its byte order mark, else as UTF-8. Malformed
/// sequences become U+FFFD, except a UTF-8 character that `cut` left
/// incomplete at the end, which is dropped.
pub(crate) fn decode(body: &[u8], content_type: Option<&str>, html: bool, cut: bool) -> String {
    let label = content_type
        .and_then(charset_param)
        .or_else(|| html.then(|| meta_charset(body)).flatten());
    let encoding = label
        .and_then(|label| Encoding::for_label(label.as_bytes()))
        .unwrap_or(UTF_8);
    let body = if cut && encoding == UTF_8 {
        &body[..body.len() - partial_utf8_tail(body)]
    } else {
        body
    };
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

/// How many bytes at the end of `body` start a UTF-8 character that is
/// not complete.
fn partial_utf8_tail(body: &[u8]) -> usize {
    for back in 1..=body.len().min(3) {
        let byte = body[body.len() - back];
        if byte & 0xc0 == 0x80 {
            continue;
        }
        let needed = match byte {
            0xf0.. => 4,
            0xe0.. => 3,
            0xc0.. => 2,
            _ => 1,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

/// `charset` from `text/html; charset="windows-1252"`.
fn charset_param(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches(['"', '\'']).to_owned())
    })
}

/// The charset a page declares in a `<meta>` tag near its start, either
/// `<meta charset="x">` or `<meta http-equiv=... content="...; charset=x">`.
fn meta_charset(body: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&body[..body.len().min(4096)]).to_ascii_lowercase();
    let mut rest = head.as_str();
    while let Some(at) = rest.find("<meta") {
        rest = &rest[at + 5..];
        let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
        if let Some(at) = tag.find("charset") {
            let value = tag[at + 7..].trim_start();
            if let Some(value) = value.strip_prefix('=') {
                let value = value.trim_start().trim_start_matches(['"', '\'']);
                let end = value
                    .find(|c: char| c == '"' || c == '\'' || c == ';' || c.is_whitespace())
                    .unwrap_or(value.len());
                let value = value[..end].trim_end_matches('/');
                if !value.is_empty() {
                    return Some(value.to_owned());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_classified() {
        let kind = |ct: &str| from_header(Some(ct));
        assert_eq!(kind("text/html; charset=utf-8"), Some(Kind::Html));
        assert_eq!(kind("application/vnd.api+json"), Some(Kind::Json));
        assert_eq!(kind("text/plain"), Some(Kind::Text));
        assert_eq!(kind("application/rss+xml"), Some(Kind::Text));
        assert_eq!(kind("application/octet-stream"), None);
        assert_eq!(
            kind("Image/PNG"),
            Some(Kind::Binary("image/png".to_owned()))
        );
        assert_eq!(from_header(None), None);
        assert_eq!(sniff(b"  <!DOCTYPE html><p>x"), Kind::Html);
        assert_eq!(sniff(b"{\"a\":1}"), Kind::Json);
        assert_eq!(sniff(b"plain words"), Kind::Text);
        assert_eq!(
            sniff(b"\x89PNG\r\n\x1a\n\0\0"),
            Kind::Binary("application/octet-stream".to_owned())
        );
    }

    #[test]
    fn charsets_come_from_the_header_then_the_meta_tag() {
        // "café" in windows-1252.
        let body = b"<html><head><meta charset='windows-1252'></head>caf\xe9</html>";
        assert!(decode(body, Some("text/html"), true, false).contains("café"));
        let body =
            b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=ISO-8859-1\">caf\xe9";
        assert!(decode(body, None, true, false).contains("café"));
        assert_eq!(
            decode(
                b"caf\xe9",
                Some("text/plain; charset=\"latin1\""),
                false,
                true
            ),
            "café"
        );
        assert_eq!(
            decode(b"caf\xc3\xa9", Some("text/plain"), false, false),
            "café"
        );
        assert_eq!(decode(b"caf\xe9", None, false, false), "caf\u{fffd}");
    }

    #[test]
    fn a_cut_never_ends_inside_a_character() {
        assert_eq!(decode(b"caf\xc3", None, false, true), "caf");
        assert_eq!(decode(b"\xe2\x82\xac\xe2\x82", None, false, true), "€");
        assert_eq!(decode(b"\xe2\x82\xac", None, false, true), "€");
        // Not cut: the broken end is shown as broken.
        assert_eq!(decode(b"caf\xc3", None, false, false), "caf\u{fffd}");
    }
}
