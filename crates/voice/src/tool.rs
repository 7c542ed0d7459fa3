//! `voice.say`: speaks a text and sends it to the turn's chat as a voice
//! note (through the context's media sender, like `media.send`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{MediaKind, ToolEffect};
use flynn_tools::builtin::OutgoingMedia;
use flynn_tools::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::Synthesizer;

/// `voice.say`.
#[derive(Debug, Clone)]
pub struct VoiceSay {
    speech: Arc<dyn Synthesizer>,
}

impl VoiceSay {
    pub fn new(speech: Arc<dyn Synthesizer>) -> Self {
        VoiceSay { speech }
    }
}

/// Arguments of `voice.say`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VoiceSayArgs {
    /// What to say, as it should be spoken (no markdown).
    text: String,
}

#[async_trait]
impl TypedTool for VoiceSay {
    type Args = VoiceSayArgs;

    fn name(&self) -> &str {
        "voice.say"
    }

    fn description(&self) -> &str {
        "Say something out loud: it is spoken and sent to the chat you are answering as a voice note. Use it when asked to say or read something aloud."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(150)
    }

    // Sends the turn's own chat what the model wrote, as `media.send`
    // sends it a file.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, args: VoiceSayArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let Some(sender) = ctx.media.as_deref() else {
            return Err(ToolError::failed(
                "voice notes can only be sent from a turn of a chat (no chat receives this one's)",
            ));
        };
        let text = crate::spoken_part(&args.text);
        if text.is_empty() {
            return Err(ToolError::failed("`text` is empty: say something"));
        }
        let speech = self
            .speech
            .speak(text)
            .await
            .map_err(|e| ToolError::failed(format!("could not speak it: {e}")))?;
        let kind = if speech.is_voice_note() {
            MediaKind::Voice
        } else {
            MediaKind::Audio
        };
        let sent = sender
            .send_media(OutgoingMedia {
                name: speech.file_name,
                media_type: speech.media_type,
                kind,
                caption: None,
                data: speech.data,
            })
            .await?;
        let cut = if text.len() < args.text.trim().len() {
            format!(" (the first {} characters)", text.chars().count())
        } else {
            String::new()
        };
        Ok(format!(
            "said it{cut} as {} ({}, {} bytes)",
            if kind == MediaKind::Voice {
                "a voice note"
            } else {
                "an audio file"
            },
            sent.media_type,
            sent.size
        ))
    }
}
