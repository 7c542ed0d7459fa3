//! RFC 2822 / MIME messages: parsed into a tree of parts (what Gmail's
//! `payload` shows), and built from a [`Mail`](super::Mail).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// One MIME part; a leaf keeps its decoded content in `body`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    /// Headers in order, unfolded, encoded words decoded.
    pub headers: Vec<(String, String)>,
    /// `type/subtype`, in lower case.
    pub mime_type: String,
    /// The attachment's file name, or empty.
    pub filename: String,
    pub body: Vec<u8>,
    pub parts: Vec<Part>,
}

impl Part {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The first leaf of `mime_type` that is not an attachment, as text.
    pub fn text_of(&self, mime_type: &str) -> Option<String> {
        if self.parts.is_empty() {
            return (self.mime_type == mime_type && self.filename.is_empty())
                .then(|| String::from_utf8_lossy(&self.body).into_owned());
        }
        self.parts.iter().find_map(|part| part.text_of(mime_type))
    }

    /// Whether some leaf is an attachment.
    pub fn has_attachment(&self) -> bool {
        !self.filename.is_empty() || self.parts.iter().any(Part::has_attachment)
    }

    /// The part at a Gmail `partId` (`""`, `"0"`, `"0.1"`…).
    pub fn at(&self, part_id: &str) -> Option<&Part> {
        if part_id.is_empty() {
            return Some(self);
        }
        let mut part = self;
        for index in part_id.split('.') {
            part = part.parts.get(index.parse::<usize>().ok()?)?;
        }
        Some(part)
    }
}

/// Parses a whole message (or one part of it).
pub(crate) fn parse(raw: &[u8]) -> Part {
    let (head, body) = split_head(raw);
    let headers = parse_headers(&String::from_utf8_lossy(head));
    let find = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
    };
    let content_type = find("content-type").unwrap_or_else(|| "text/plain".to_owned());
    let mime_type = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let filename = find("content-disposition")
        .and_then(|d| param(&d, "filename"))
        .or_else(|| param(&content_type, "name"))
        .unwrap_or_default();
    let boundary = param(&content_type, "boundary");
    if mime_type.starts_with("multipart/")
        && let Some(boundary) = boundary
    {
        let parts = split_multipart(body, &boundary)
            .iter()
            .map(|part| parse(part))
            .collect();
        return Part {
            headers,
            mime_type,
            filename,
            body: Vec::new(),
            parts,
        };
    }
    let encoding = find("content-transfer-encoding")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let body = match encoding.as_str() {
        "base64" => {
            let clean: Vec<u8> = body
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            STANDARD.decode(clean).unwrap_or_default()
        }
        "quoted-printable" => quoted_printable(body),
        _ => body.to_vec(),
    };
    Part {
        headers,
        mime_type,
        filename,
        body,
        parts: Vec::new(),
    }
}

fn split_head(raw: &[u8]) -> (&[u8], &[u8]) {
    if raw.starts_with(b"\r\n") {
        return (&[], &raw[2..]);
    }
    if raw.starts_with(b"\n") {
        return (&[], &raw[1..]);
    }
    let crlf = raw.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = raw.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(c), Some(l)) if l < c => (&raw[..l], &raw[l + 2..]),
        (Some(c), _) => (&raw[..c], &raw[c + 4..]),
        (None, Some(l)) => (&raw[..l], &raw[l + 2..]),
        (None, None) => (raw, &[]),
    }
}

fn parse_headers(head: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = headers.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    headers
        .into_iter()
        .map(|(name, value)| (name, decode_words(&value)))
        .collect()
}

/// A parameter of a structured header (`boundary`, `filename`…).
pub(crate) fn param(value: &str, name: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|piece| {
        let (key, val) = piece.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| val.trim().trim_matches('"').to_owned())
    })
}

/// The bodies of a multipart's parts (the preamble and epilogue dropped).
pub(crate) fn split_multipart<'a>(body: &'a [u8], boundary: &str) -> Vec<Vec<u8>> {
    let delimiter = format!("--{boundary}");
    let close = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&'a [u8]>> = None;
    for line in body.split(|b| *b == b'\n') {
        let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(trimmed);
        let text = text.trim_end();
        if text == close || text == delimiter {
            if let Some(lines) = current.take() {
                parts.push(lines.join(&b"\r\n"[..]));
            }
            if text == close {
                break;
            }
            current = Some(Vec::new());
        } else if let Some(lines) = &mut current {
            lines.push(trimmed);
        }
    }
    parts
}

fn quoted_printable(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'=' {
            if body.get(i + 1) == Some(&b'\r') && body.get(i + 2) == Some(&b'\n') {
                i += 3;
                continue;
            }
            if body.get(i + 1) == Some(&b'\n') {
                i += 2;
                continue;
            }
            if let Some(hex) = body.get(i + 1..i + 3)
                && let Ok(hex) = std::str::from_utf8(hex)
                && let Ok(byte) = u8::from_str_radix(hex, 16)
            {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(body[i]);
        i += 1;
    }
    out
}

/// RFC 2047 encoded words (`=?UTF-8?B?…?=`, `=?UTF-8?Q?…?=`) decoded.
pub(crate) fn decode_words(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    let mut last_was_word = false;
    while let Some(start) = rest.find("=?") {
        let before = &rest[..start];
        let after = &rest[start + 2..];
        let word = after.split_once('?').and_then(|(charset, after)| {
            let (kind, after) = after.split_once('?')?;
            let (text, after) = after.split_once("?=")?;
            Some((charset, kind, text, after))
        });
        let Some((charset, kind, text, after)) = word else {
            break;
        };
        let bytes = match kind {
            "B" | "b" => STANDARD.decode(text).ok(),
            "Q" | "q" => Some(quoted_printable(text.replace('_', " ").as_bytes())),
            _ => None,
        };
        let Some(bytes) = bytes else {
            break;
        };
        if !(last_was_word && before.trim().is_empty()) {
            out.push_str(before);
        }
        if charset.eq_ignore_ascii_case("iso-8859-1") {
            out.extend(bytes.iter().map(|b| char::from(*b)));
        } else {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
        last_was_word = true;
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A header value, as an encoded word when it is not plain ASCII.
pub(crate) fn encode_word(value: &str) -> String {
    if value.is_ascii() {
        value.to_owned()
    } else {
        format!("=?UTF-8?B?{}?=", STANDARD.encode(value))
    }
}

/// A leaf part's text: its content headers, a blank line and its body.
pub(crate) fn leaf(content_type: &str, extra: &[(&str, String)], data: &[u8]) -> String {
    let mut out = format!("Content-Type: {content_type}\r\n");
    for (name, value) in extra {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    let plain = data.is_ascii() && data.split(|b| *b == b'\n').all(|l| l.len() < 900);
    if plain && extra.is_empty() {
        out.push_str("Content-Transfer-Encoding: 7bit\r\n\r\n");
        out.push_str(
            &String::from_utf8_lossy(data)
                .replace("\r\n", "\n")
                .replace('\n', "\r\n"),
        );
    } else {
        out.push_str("Content-Transfer-Encoding: base64\r\n\r\n");
        let encoded = STANDARD.encode(data);
        for chunk in encoded.as_bytes().chunks(76) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push_str("\r\n");
        }
    }
    out
}

/// A multipart part made of already built parts.
pub(crate) fn multipart(subtype: &str, boundary: &str, parts: &[String]) -> String {
    let mut out = format!("Content-Type: multipart/{subtype}; boundary=\"{boundary}\"\r\n\r\n");
    for part in parts {
        out.push_str(&format!("--{boundary}\r\n{part}\r\n"));
    }
    out.push_str(&format!("--{boundary}--\r\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_multiparts_and_encodings_are_read() {
        let raw = b"From: =?UTF-8?B?SsO8cmdlbg==?= <j@example.com>\r\nSubject: =?utf-8?Q?Gr=C3=BC=C3=9Fe?=\r\n\
Content-Type: multipart/mixed; boundary=\"m\"\r\n\r\npreamble\r\n--m\r\n\
Content-Type: multipart/alternative; boundary=a\r\n\r\n--a\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\r\nHall=C3=B6 =\r\nWelt\r\n--a\r\nContent-Type: text/html\r\n\r\n<p>x</p>\r\n--a--\r\n\
--m\r\nContent-Type: application/pdf; name=\"r.pdf\"\r\nContent-Disposition: attachment; filename=\"r.pdf\"\r\n\
Content-Transfer-Encoding: base64\r\n\r\nJVBE\r\nRg==\r\n--m--\r\n";
        let part = parse(raw);
        assert_eq!(part.header("from"), Some("Jürgen <j@example.com>"));
        assert_eq!(part.header("Subject"), Some("Grüße"));
        assert_eq!(part.mime_type, "multipart/mixed");
        assert_eq!(part.text_of("text/plain").as_deref(), Some("Hallö Welt"));
        assert_eq!(part.text_of("text/html").as_deref(), Some("<p>x</p>"));
        let pdf = part.at("1").unwrap();
        assert_eq!(
            (pdf.filename.as_str(), pdf.body.as_slice()),
            ("r.pdf", &b"%PDF"[..])
        );
        assert!(part.has_attachment());
    }
}
