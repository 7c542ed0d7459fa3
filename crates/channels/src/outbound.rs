//! The way out, shared by every adapter: markdown rendered in the
//! platform's format and cut to its size, platform errors retried as the
//! platform asks, and an answer that grows kept in step across the
//! messages that show it.

use std::time::Duration;

use crate::adapter::{Button, ChannelAdapter, ChannelError, MessageId, Target};
use crate::chunk::{Measure, chunk};

/// How many times a call is tried before its error is returned.
pub const ATTEMPTS: u32 = 4;
/// The longest wait between attempts; a platform asking for longer gets
/// the error instead.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// The model's markdown as the platform's messages: formatted, each
/// within the platform's limit. Cutting happens on the markdown (so code
/// blocks are closed and reopened, never split inside a tag) and again
/// on a piece whose formatting grew past the limit.
pub fn render(adapter: &dyn ChannelAdapter, markdown: &str) -> Vec<String> {
    let caps = adapter.capabilities();
    let mut out = Vec::new();
    let format = |piece: &str| adapter.format(piece);
    render_into(
        &format,
        caps.max_len,
        caps.measure,
        markdown,
        caps.max_len,
        &mut out,
    );
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// The smallest limit the chunker cuts to (it raises smaller ones).
const CHUNK_FLOOR: usize = 32;

fn render_into(
    format: &dyn Fn(&str) -> String,
    max_len: usize,
    measure: Measure,
    markdown: &str,
    limit: usize,
    out: &mut Vec<String>,
) {
    for piece in chunk(markdown, limit, measure) {
        let formatted = format(&piece);
        let len = measure.of(&formatted);
        if len <= max_len {
            out.push(formatted);
        } else if limit > CHUNK_FLOOR {
            // Escaping made it longer: cut the markdown smaller, in
            // proportion, with a margin, and always smaller than before
            // (so this ends at the chunker's floor).
            let size = measure.of(&piece).min(limit);
            let smaller = (size * max_len / len)
                .saturating_sub(16)
                .clamp(CHUNK_FLOOR, limit - 1);
            render_into(format, max_len, measure, &piece, smaller, out);
        } else {
            // Even the chunker's smallest piece formats past the limit
            // (a limit of a few dozen characters, which no platform has):
            // cut the formatted text itself. A tag may be split, no text
            // is lost.
            split(&formatted, max_len, measure, out);
        }
    }
}

/// Cuts `text` into parts of at most `max_len`, between characters (a
/// character longer than `max_len` on its own makes a part by itself).
fn split(text: &str, max_len: usize, measure: Measure, out: &mut Vec<String>) {
    let mut part = String::new();
    let mut len = 0;
    for c in text.chars() {
        let size = measure.of(c.encode_utf8(&mut [0; 4]));
        if len + size > max_len && !part.is_empty() {
            out.push(std::mem::take(&mut part));
            len = 0;
        }
        part.push(c);
        len += size;
    }
    if !part.is_empty() {
        out.push(part);
    }
}

/// Runs a platform call, retrying rate limits (after the platform's hint)
/// and outages (after 0.5, 1, 2 s).
pub async fn retrying<T, F, Fut>(mut call: F) -> Result<T, ChannelError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ChannelError>>,
{
    let mut backoff = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(e) if e.is_transient() && attempt < ATTEMPTS => {
                let wait = match &e {
                    ChannelError::RateLimited {
                        retry_after: Some(hint),
                        ..
                    } => *hint,
                    _ => backoff,
                };
                if wait > MAX_WAIT {
                    return Err(e);
                }
                tracing::debug!(error = %e, wait_ms = wait.as_millis() as u64, attempt, "retrying a channel call");
                tokio::time::sleep(wait).await;
                backoff *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The messages one answer occupies on a platform.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    pub parts: Vec<MessageId>,
    /// What each part shows now (formatted text, whether it carries the
    /// buttons), to skip edits that change nothing.
    shown: Vec<(String, bool)>,
}

/// Sends markdown as one or more messages; the buttons go under the
/// last one.
pub async fn send(
    adapter: &dyn ChannelAdapter,
    to: &Target,
    markdown: &str,
    buttons: &[Button],
) -> Result<Sent, ChannelError> {
    let mut sent = Sent::default();
    show(adapter, to, &mut sent, markdown, buttons).await?;
    Ok(sent)
}

/// Brings the messages of `sent` to show `markdown`: parts whose text
/// changed are edited, parts the text grew into are sent. On a platform
/// that cannot edit, only parts not sent yet are sent.
pub async fn show(
    adapter: &dyn ChannelAdapter,
    to: &Target,
    sent: &mut Sent,
    markdown: &str,
    buttons: &[Button],
) -> Result<(), ChannelError> {
    let caps = adapter.capabilities();
    let parts = render(adapter, markdown);
    let last = parts.len() - 1;
    for (i, text) in parts.iter().enumerate() {
        let part_buttons = if i == last { buttons } else { &[] };
        let now = (text.clone(), !part_buttons.is_empty());
        if let Some(id) = sent.parts.get(i).cloned() {
            if !caps.edit || sent.shown[i] == now {
                continue;
            }
            retrying(|| adapter.edit(to, &id, text, part_buttons)).await?;
            sent.shown[i] = now;
        } else {
            let id = retrying(|| adapter.send(to, text, part_buttons)).await?;
            sent.parts.push(id);
            sent.shown.push(now);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format;

    /// What `render` gives for a platform of this limit, measure and
    /// format.
    fn rendered(
        format: fn(&str) -> String,
        max_len: usize,
        measure: Measure,
        markdown: &str,
    ) -> Vec<String> {
        let mut out = Vec::new();
        render_into(&format, max_len, measure, markdown, max_len, &mut out);
        out
    }

    /// The letters and digits a reader sees: Telegram's tags left out.
    fn letters(text: &str) -> Vec<char> {
        let mut seen = Vec::new();
        let mut in_tag = false;
        for c in text.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag && c.is_alphanumeric() => seen.push(c),
                _ => {}
            }
        }
        seen
    }

    /// Found by the `format` fuzz target: empty code spans and fences grow
    /// five to seven times in Telegram's HTML (`` `` `` is
    /// `<code></code>`), more than cutting the markdown to 64 characters
    /// four times absorbed, and the part went out over the limit.
    #[test]
    fn a_part_that_formatting_grows_is_cut_until_it_fits() {
        let markdown = "```````\n\n```\n`````e`\n```\n````\n\u{18}``\n```\n````\n``` ```\n\
            `````lan\u{fffd}\u{fffd}\u{e9} \u{fffd}\u{600}\u{e9} \u{fffd}`e`\n```\n````\n\
            \u{18}``\n```\n````\n\u{1}\\lang\ncod`e\n";
        type Formatter = fn(&str) -> String;
        let platforms: [(&str, Formatter, Measure); 4] = [
            ("telegram", format::telegram_html, Measure::Utf16),
            ("slack", format::slack_mrkdwn, Measure::Chars),
            ("discord", format::discord, Measure::Chars),
            ("whatsapp", format::whatsapp, Measure::Chars),
        ];
        for (name, format, measure) in platforms {
            let whole = letters(&format(markdown));
            for max_len in [320, 100, 40, 8] {
                let parts = rendered(format, max_len, measure, markdown);
                for part in &parts {
                    assert!(
                        measure.of(part) <= max_len,
                        "{name}: {part:?} is over {max_len}"
                    );
                }
                // No text lost: what the whole answer shows, in order (a
                // reopened fence may repeat its language).
                let shown = letters(&parts.concat());
                let mut rest = shown.iter();
                assert!(
                    whole.iter().all(|c| rest.any(|s| s == c)),
                    "{name} at {max_len} lost text: {parts:?}"
                );
            }
        }
    }
}
