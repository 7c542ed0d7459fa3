//! `media.send`: a file from the workspace to the chat the turn answers.
//!
//! The runtime keeps a copy and announces it in an
//! [`AgentEvent::Media`](flynn_protocol::AgentEvent::Media) event: chat
//! channels deliver it natively (a photo, a document, an audio file, a
//! voice note) and the web chat shows it. Only files inside the workspace
//! can be sent, regular files only (no links out of it), at most
//! [`MAX_SEND_BYTES`].

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flynn_protocol::{MediaFile, MediaKind, ToolEffect};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::files::open_regular;
use crate::confine::display;
use crate::{ToolContext, ToolError, TypedTool};

/// The largest file the agent may send (the Bot API's upload limit).
pub const MAX_SEND_BYTES: u64 = 50 * 1024 * 1024;
/// Characters of a caption.
const CAPTION_MAX: usize = 1000;

/// A file on its way to the chat, for [`MediaSender::send_media`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMedia {
    /// The name shown (`chart.png`).
    pub name: String,
    pub media_type: String,
    pub kind: MediaKind,
    pub caption: Option<String>,
    pub data: Bytes,
}

/// What the runtime does with a file a tool sends: keeps it and tells the
/// turn's chat ([`ToolContext::media`]).
#[async_trait]
pub trait MediaSender: Send + Sync {
    async fn send_media(&self, media: OutgoingMedia) -> Result<MediaFile, ToolError>;
}

/// The sender of `ctx`, or an error saying there is none.
pub(crate) fn sender(ctx: &ToolContext) -> Result<&dyn MediaSender, ToolError> {
    ctx.media.as_deref().ok_or_else(|| {
        ToolError::failed(
            "files can only be sent from a turn of a chat (no chat receives this one's files)",
        )
    })
}

/// The MIME type of a file called `name` (`application/octet-stream`
/// when the extension says nothing).
pub fn media_type_of(name: &str) -> String {
    mime_guess::from_path(name)
        .first()
        .map_or_else(|| "application/octet-stream".to_owned(), |m| m.to_string())
}

/// How a file of `media_type` is shown when the caller does not say.
pub fn kind_of(media_type: &str) -> MediaKind {
    match media_type {
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" => MediaKind::Image,
        t if t.starts_with("audio/") => MediaKind::Audio,
        _ => MediaKind::Document,
    }
}

/// `media.send`.
#[derive(Debug, Clone)]
pub struct MediaSend {
    timeout: Duration,
}

impl MediaSend {
    pub fn new(timeout: Duration) -> Self {
        MediaSend { timeout }
    }
}

/// Arguments of `media.send`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MediaSendArgs {
    /// Path of the file in the workspace.
    path: String,
    /// Short text shown with the file.
    caption: Option<String>,
    /// How to show it: `image` (a picture inline), `document`, `audio` or
    /// `voice` (a voice note). By default, from the file's type.
    #[serde(rename = "as")]
    kind: Option<MediaKind>,
}

#[async_trait]
impl TypedTool for MediaSend {
    type Args = MediaSendArgs;

    fn name(&self) -> &str {
        "media.send"
    }

    fn description(&self) -> &str {
        "Send a file from the workspace (a chart, a picture, a document, audio) to the chat you are answering, with an optional caption. Write or make the file first."
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    // It shows a workspace file to the person the turn answers, as
    // `file.read` shows its text: reading the owner's data, sending
    // nothing anywhere else.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        // Files arrive in the order they were sent.
        false
    }

    fn reads_private_data(&self) -> bool {
        true
    }

    async fn run(&self, args: MediaSendArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let sender = sender(ctx)?;
        let path = ctx.confine(&args.path)?;
        let shown = display(&ctx.workspace, &path);
        if tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir()) {
            return Err(ToolError::failed(format!(
                "{shown} is a directory; send one file (make an archive of a directory first)"
            )));
        }
        let opened = {
            let (path, name) = (path.clone(), shown.clone());
            tokio::task::spawn_blocking(move || open_regular(&path, &name))
                .await
                .map_err(|e| ToolError::failed(format!("cannot open {shown}: {e}")))?
        };
        let file = tokio::fs::File::from_std(opened?);
        let size = file
            .metadata()
            .await
            .map_err(|e| ToolError::failed(format!("cannot read {shown}: {e}")))?
            .len();
        if size > MAX_SEND_BYTES {
            return Err(ToolError::failed(format!(
                "{shown} has {:.1} MB, over the {} MB a sent file may have",
                size as f64 / 1_048_576.0,
                MAX_SEND_BYTES / 1_048_576
            )));
        }
        if size == 0 {
            return Err(ToolError::failed(format!(
                "{shown} is empty; chats do not take empty files"
            )));
        }
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(MAX_SEND_BYTES + 1)
            .read_to_end(&mut data)
            .await
            .map_err(|e| ToolError::failed(format!("cannot read {shown}: {e}")))?;
        let name = path
            .file_name()
            .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
        let media_type = media_type_of(&name);
        let kind = args.kind.unwrap_or_else(|| kind_of(&media_type));
        let caption = args
            .caption
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .map(|c| match c.char_indices().nth(CAPTION_MAX) {
                Some((cut, _)) => format!("{}…", &c[..cut]),
                None => c,
            });
        let sent = sender
            .send_media(OutgoingMedia {
                name,
                media_type,
                kind,
                caption,
                data: Bytes::from(data),
            })
            .await?;
        Ok(format!(
            "sent {shown} to the chat as {} ({}, {} bytes)",
            match sent.kind {
                MediaKind::Image => "an image",
                MediaKind::Document => "a document",
                MediaKind::Audio => "audio",
                MediaKind::Voice => "a voice note",
            },
            sent.media_type,
            sent.size
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn types_and_kinds_come_from_the_name() {
        assert_eq!(media_type_of("chart.png"), "image/png");
        assert_eq!(media_type_of("report.pdf"), "application/pdf");
        assert_eq!(media_type_of("notes"), "application/octet-stream");
        assert_eq!(kind_of("image/png"), MediaKind::Image);
        assert_eq!(kind_of("image/svg+xml"), MediaKind::Document);
        assert_eq!(kind_of("audio/ogg"), MediaKind::Audio);
        assert_eq!(kind_of("application/pdf"), MediaKind::Document);
    }
}
