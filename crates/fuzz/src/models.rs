//! What model vendors send: server-sent event streams, each vendor's
//! events, error bodies and retry hints.

use bytes::Bytes;
use flynn_models::bench::{self, Wire};
use flynn_models::fuzzing;
use http::{HeaderMap, HeaderValue};

use crate::{fields, skip_known, text};

fn wire(flag: u8) -> Wire {
    if flag & 1 == 0 {
        Wire::OpenAi
    } else {
        Wire::Anthropic
    }
}

/// Bodies up to this long are also parsed a byte at a time. The SSE
/// parser scans a line again from its start for each chunk that does not
/// end it, so a byte at a time costs the square of the line's length: at
/// a few thousand bytes that made the target run at 150 inputs a second.
/// Longer bodies are still cut in chunks of the flag's size (from 1).
const BYTE_BY_BYTE: usize = 256;

/// `flag body`: the stream parsed whole, byte by byte (bodies up to
/// `BYTE_BY_BYTE`), and in chunks of a size the flag picks; every split
/// gives the same result.
pub fn sse(data: &[u8]) {
    let Some((&flag, body)) = data.split_first() else {
        return;
    };
    let wire = wire(flag);
    let parse = |chunks: Vec<Bytes>| {
        futures::executor::block_on(bench::parse(wire, chunks)).map_err(|e| e.to_string())
    };
    let whole = parse(vec![Bytes::copy_from_slice(body)]);
    let bytes = if body.len() <= BYTE_BY_BYTE {
        parse(body.iter().map(|b| Bytes::copy_from_slice(&[*b])).collect())
    } else {
        whole.clone()
    };
    let size = usize::from(flag >> 1).max(1);
    let sized = parse(body.chunks(size).map(Bytes::copy_from_slice).collect());
    assert_eq!(
        whole.is_ok(),
        bytes.is_ok(),
        "byte by byte: {whole:?} / {bytes:?}"
    );
    assert_eq!(
        whole.is_ok(),
        sized.is_ok(),
        "chunks of {size}: {whole:?} / {sized:?}"
    );
    if let (Ok(a), Ok(b), Ok(c)) = (&whole, &bytes, &sized) {
        assert_eq!((a, a), (b, c), "the event count depends on the split");
    }
}

/// `flag (event TAB data LF)*`: events fed straight to a vendor's
/// assembler, then finished.
pub fn wire_events(data: &[u8]) {
    let Some((&flag, rest)) = data.split_first() else {
        return;
    };
    let events: Vec<(String, String)> = text(rest)
        .split('\n')
        .map(|line| match line.split_once('\t') {
            Some((name, data)) => (name.to_owned(), data.to_owned()),
            None => (String::new(), line.to_owned()),
        })
        .collect();
    let _ = fuzzing::assemble(wire(flag), &events);
}

/// A JSON error body read as the vendor's error.
pub fn vendor_error(data: &[u8]) {
    let body = text(data);
    let (message, _, _) = fuzzing::vendor_error(&body);
    let _ = message;
}

/// Whether a retry hint is one of the known panics (a wait of more
/// seconds than a `Duration` holds).
fn huge(value: &[u8]) -> bool {
    skip_known()
        && std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|v| v.abs() > 1e15)
}

/// `header value NUL discord body NUL status`: the retry hints of
/// every vendor (`Retry-After`, `retry-after-ms`, Slack's header,
/// Discord's body and header).
pub fn retry_hints(data: &[u8]) {
    let [value, body, status] = fields(data, 3)[..] else {
        return;
    };
    let body_hint = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("retry_after").and_then(serde_json::Value::as_f64));
    if huge(value) || (skip_known() && body_hint.is_some_and(|v| v.abs() > 1e15)) {
        return;
    }
    if let Ok(header) = HeaderValue::from_bytes(value) {
        for name in ["retry-after", "retry-after-ms"] {
            let mut headers = HeaderMap::new();
            headers.insert(name, header.clone());
            let _ = fuzzing::retry_after(&headers);
        }
    }
    let _ = flynn_channels::slack::fuzzing::retry_after(value);
    let header = std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok());
    let status = match status {
        [a, b, ..] => u16::from_be_bytes([*a, *b]) % 600,
        _ => 429,
    };
    for status in [429, status] {
        let _ = flynn_channels::discord::fuzzing::error_from(status, header, body);
    }
}
