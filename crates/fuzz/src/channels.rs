//! The chat platforms: what each posts or pushes to Flynn, their
//! signatures, and the markdown Flynn sends them (formatted and cut).

use std::collections::HashMap;

use async_trait::async_trait;
use flynn_channels::adapter::{
    Button, Capabilities, ChannelAdapter, ChannelError, MessageId, Target,
};
use flynn_channels::inbound::Inbound;
use flynn_channels::{Measure, chunk, format, outbound};
use tokio_util::sync::CancellationToken;

use crate::{fields, is_subsequence, skip_known, text};

/// `kind text`: kind picks what the bytes are (a `Message`, a
/// `CallbackQuery`, or a text with mention entities); an inbound text
/// is always made of the message's own characters.
pub fn telegram(data: &[u8]) {
    use flynn_channels::telegram::fuzzing;
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            let _ = fuzzing::message(rest);
        }
        1 => {
            let _ = fuzzing::callback(rest);
        }
        _ => {
            // `entities NUL text`: each entity is 5 bytes (kind, offset
            // u16, length u16).
            let [entities, text] = fields(rest, 2)[..] else {
                return;
            };
            let text = crate::text(text);
            let kinds = ["mention", "text_mention", "bot_command", "bold", "url"];
            let entities: Vec<(&str, u16, u16)> = entities
                .chunks_exact(5)
                .map(|e| {
                    (
                        kinds[usize::from(e[0]) % kinds.len()],
                        u16::from_le_bytes([e[1], e[2]]),
                        u16::from_le_bytes([e[3], e[4]]),
                    )
                })
                .collect();
            let (_, out) = fuzzing::strip_mentions(&text, &entities);
            assert!(
                is_subsequence(out.chars(), &text),
                "{out:?} is not made of {text:?}"
            );
        }
    }
}

/// `kind rest`: an Events API event, a button press, a slash command's
/// form, a text with mentions, or a request's signature
/// (`timestamp NUL signature NUL body`).
pub fn slack(data: &[u8]) {
    use flynn_channels::slack::fuzzing;
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => {
            if let Ok(event) = serde_json::from_slice(rest) {
                let _ = fuzzing::message_event(&event);
            }
        }
        1 => {
            if let Ok(payload) = serde_json::from_slice(rest) {
                let _ = fuzzing::block_actions(&payload);
            }
        }
        2 => {
            let _ = fuzzing::slash_command(rest);
        }
        3 => {
            let _ = fuzzing::without_mention(&text(rest));
        }
        _ => {
            let [timestamp, signature, body] = fields(rest, 3)[..] else {
                return;
            };
            let far = std::str::from_utf8(timestamp)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
                .is_some_and(|t| t.unsigned_abs() > 1 << 40);
            if skip_known() && far {
                return;
            }
            let now = 1_700_000_000;
            let verdict = fuzzing::verify("secret", timestamp, signature, body, now);
            // A forged signature never passes.
            assert!(verdict.is_err(), "a fuzzed signature was accepted");
        }
    }
}

/// `kind rest`: a MESSAGE_CREATE, an INTERACTION_CREATE, or a text with
/// mentions.
pub fn discord(data: &[u8]) {
    use flynn_channels::discord::fuzzing;
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            let _ = fuzzing::message(rest);
        }
        1 => {
            let _ = fuzzing::interaction(rest);
        }
        _ => {
            let text = text(rest);
            let out = fuzzing::strip_mention(&text);
            assert!(out.len() <= text.len());
        }
    }
}

/// `kind rest`: a webhook notification, a signature check
/// (`header NUL body`) or the subscription handshake's query.
pub fn whatsapp(data: &[u8]) {
    use flynn_channels::whatsapp::fuzzing;
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if skip_known() && long_digit_run(rest) {
                return;
            }
            let _ = fuzzing::webhook(rest);
        }
        1 => {
            let [header, body] = fields(rest, 2)[..] else {
                return;
            };
            let header = text(header);
            assert!(
                !fuzzing::signed("secret", body, Some(&header)),
                "a fuzzed signature was accepted"
            );
        }
        _ => {
            let _ = fuzzing::handshake(&text(rest));
        }
    }
}

/// Whether the bytes hold 12 digits in a row (a timestamp past what a
/// `SystemTime` holds: a known panic).
fn long_digit_run(data: &[u8]) -> bool {
    data.split(|b| !b.is_ascii_digit())
        .any(|run| run.len() >= 12)
}

/// One platform's markdown formatter.
type Formatter = fn(&str) -> String;

/// A platform as `outbound::render` sees it.
struct Platform {
    caps: Capabilities,
    format: Formatter,
}

#[async_trait]
impl ChannelAdapter for Platform {
    fn name(&self) -> &str {
        "fuzz"
    }

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn format(&self, markdown: &str) -> String {
        (self.format)(markdown)
    }

    async fn connect(&self, _sink: Inbound, _stop: CancellationToken) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn send(
        &self,
        _to: &Target,
        _text: &str,
        _buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        Ok(MessageId(String::new()))
    }
}

/// Telegram's HTML is balanced: only the tags Flynn writes, each closed
/// in order, `&` only in entities, `<` only in tags.
fn assert_balanced_html(html: &str) {
    const TAGS: &[&str] = &["b", "i", "s", "u", "code", "pre", "a", "blockquote"];
    let mut open: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(['<', '&']) {
        let after = &rest[at..];
        if after.starts_with('&') {
            let entity = after.split(';').next().unwrap_or_default();
            assert!(
                matches!(entity, "&lt" | "&gt" | "&amp" | "&quot"),
                "a bare & in {html:?}"
            );
            rest = &after[entity.len() + 1..];
            continue;
        }
        let Some(end) = after.find('>') else {
            panic!("an unclosed tag in {html:?}");
        };
        let tag = &after[1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name), "</{name}> out of order in {html:?}");
        } else {
            let name = tag.split(' ').next().unwrap_or_default();
            assert!(TAGS.contains(&name), "<{tag}> in {html:?}");
            open.push(name);
        }
        rest = &after[end + 1..];
    }
    assert!(open.is_empty(), "{open:?} left open in {html:?}");
}

/// How many times each letter and digit occurs.
fn alnum_counts(text: &str) -> HashMap<char, usize> {
    let mut counts = HashMap::new();
    for c in text.chars().filter(|c| c.is_alphanumeric()) {
        *counts.entry(c).or_insert(0) += 1;
    }
    counts
}

/// `a b markdown`: the markdown cut by the chunker (limit from `a`,
/// measure from `b`), formatted for each platform, and rendered for
/// each platform at a limit from `a`. Every piece fits; no letter or
/// digit is lost; Telegram's HTML is balanced.
pub fn format(data: &[u8]) {
    let [a, b, ref rest @ ..] = data[..] else {
        return;
    };
    let markdown = text(rest);
    let measure = [Measure::Chars, Measure::Utf16, Measure::Bytes][usize::from(b) % 3];
    let limit = usize::from(a);
    let pieces = chunk(&markdown, limit, measure);
    let kept = |c: &char| !c.is_whitespace() && *c != '`';
    for piece in &pieces {
        assert!(
            measure.of(piece) <= limit.max(32),
            "{piece:?} is over {limit}"
        );
        assert!(!piece.trim().is_empty(), "an empty piece");
    }
    let joined = pieces.concat();
    assert!(
        is_subsequence(markdown.chars().filter(kept), &joined),
        "the chunks lost text: {pieces:?}"
    );

    let html = format::telegram_html(&markdown);
    assert_balanced_html(&html);
    // A fence's info string (```rust) is the block's language, which
    // some platforms drop.
    let prose: String = markdown
        .lines()
        .filter(|line| !line.trim_start().starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n");
    let letters = alnum_counts(&prose);
    for (name, formatted) in [
        ("telegram", &html),
        ("slack", &format::slack_mrkdwn(&markdown)),
        ("discord", &format::discord(&markdown)),
        ("whatsapp", &format::whatsapp(&markdown)),
    ] {
        let out = alnum_counts(formatted);
        for (c, n) in &letters {
            assert!(
                out.get(c).copied().unwrap_or(0) >= *n,
                "{name} lost {c:?}: {formatted:?}"
            );
        }
    }

    let max_len = 320 + usize::from(a) * 4;
    let platforms: [(Measure, Formatter); 4] = [
        (Measure::Utf16, format::telegram_html),
        (Measure::Chars, format::slack_mrkdwn),
        (Measure::Chars, format::discord),
        (Measure::Chars, format::whatsapp),
    ];
    for (measure, format) in platforms {
        let platform = Platform {
            caps: Capabilities {
                max_len,
                measure,
                edit: true,
                buttons: true,
                typing: true,
                edit_interval: std::time::Duration::from_secs(1),
            },
            format,
        };
        for part in outbound::render(&platform, &markdown) {
            assert!(measure.of(&part) <= max_len, "{part:?} is over {max_len}");
        }
    }
}
