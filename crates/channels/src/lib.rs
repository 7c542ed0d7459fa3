//! Flynn's chat channels.
//!
//! - [`ChannelAdapter`]: what one platform implements (connect and
//!   receive, send, edit, typing, buttons, webhooks).
//! - [`Registry`]: runs adapters under supervision (reconnects with
//!   backoff, isolates failures) and reports their health.
//! - [`Inbound`]: where adapters hand what they receive, acknowledging it
//!   to the platform only once the daemon stored it.
//! - Shared utilities: [`chunk`] (cutting to a platform's limit without
//!   breaking code blocks, words or characters), [`format`] (markdown per
//!   platform), [`outbound`] (render, retry, keep a growing answer in
//!   step), [`ratelimit`] (per-sender budgets), [`signature`] (webhook
//!   HMACs). Pairing codes are kept with the sessions
//!   (`flynn_sessions::pairing`).
//!
//! Adapters, each behind its cargo feature: `telegram`, `discord`,
//! `slack`, `whatsapp`. The Discord gateway and Slack's Socket Mode build
//! their TLS connections from the process-wide rustls `CryptoProvider`:
//! a program that enables more than one provider must install one first
//! (`rustls::crypto::aws_lc_rs::default_provider().install_default()`),
//! as Flynn's binaries do.

pub mod adapter;
pub mod chunk;
pub mod configured;
pub mod format;
pub mod inbound;
pub mod outbound;
pub mod ratelimit;
pub mod registry;
pub mod signature;

#[cfg(feature = "discord")]
pub mod discord;
#[cfg(feature = "slack")]
pub mod slack;
#[cfg(feature = "telegram")]
pub mod telegram;
#[cfg(feature = "whatsapp")]
pub mod whatsapp;

pub use adapter::{
    Action, Attachment, AttachmentKind, Button, ButtonStyle, Capabilities, ChannelAdapter,
    ChannelError, ChatKind, Conversation, FileKind, InboundEvent, InboundMessage, MessageId,
    OutgoingFile, Sender, Target, WebhookRequest, WebhookResponse,
};
pub use chunk::{Measure, chunk};
pub use inbound::{Delivery, Disposition, Inbound};
pub use registry::{Backoff, ChannelState, ChannelStatus, ConnectGate, Registry};

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

/// The channels this build can run: the adapters compiled in.
pub const COMPILED: &[&str] = &[
    #[cfg(feature = "telegram")]
    "telegram",
    #[cfg(feature = "discord")]
    "discord",
    #[cfg(feature = "slack")]
    "slack",
    #[cfg(feature = "whatsapp")]
    "whatsapp",
];
