//! The way out, shared by every adapter: markdown rendered in the
//! platform's format and cut to its size, platform errors retried as the
//! platform asks, and an answer that grows kept in step across the
//! messages that show it.

use std::time::Duration;

use crate::adapter::{Button, ChannelAdapter, ChannelError, MessageId, Target};
use crate::chunk::chunk;

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
    render_into(adapter, markdown, caps.max_len, &mut out, 0);
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

fn render_into(
    adapter: &dyn ChannelAdapter,
    markdown: &str,
    limit: usize,
    out: &mut Vec<String>,
    depth: u32,
) {
    let caps = adapter.capabilities();
    for piece in chunk(markdown, limit, caps.measure) {
        let formatted = adapter.format(&piece);
        let len = caps.measure.of(&formatted);
        if len <= caps.max_len || depth >= 4 {
            out.push(formatted);
        } else {
            // Escaping made it longer: cut the markdown smaller, in
            // proportion, with a margin.
            let smaller = (limit * caps.max_len / len.max(1))
                .saturating_sub(16)
                .max(64);
            render_into(adapter, &piece, smaller, out, depth + 1);
        }
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
