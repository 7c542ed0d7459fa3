//! Flynn's chat channels. Today: the utilities every platform adapter
//! shares: [`chunk`] (an answer split into messages a platform accepts),
//! [`format`] (the model's markdown in Telegram HTML, Slack mrkdwn and
//! Discord markdown) and [`pairing`] (allowlists, and pairing codes for
//! unknown senders). The `ChannelAdapter` trait, the registry and the
//! adapters come next.

pub mod chunk;
pub mod format;
pub mod pairing;

pub use chunk::{Measure, chunk};

/// Message length limits of the platforms, in their own measure.
pub mod limits {
    use crate::Measure;

    /// Telegram: 4096 UTF-16 code units after entity parsing.
    pub const TELEGRAM: (usize, Measure) = (4096, Measure::Utf16);
    /// Discord: 2000 characters.
    pub const DISCORD: (usize, Measure) = (2000, Measure::Chars);
    /// Slack: 40,000 characters are accepted; 4000 is where Slack
    /// recommends splitting for readability.
    pub const SLACK: (usize, Measure) = (4000, Measure::Chars);
    /// WhatsApp Cloud API: 4096 characters of text body.
    pub const WHATSAPP: (usize, Measure) = (4096, Measure::Chars);
}
