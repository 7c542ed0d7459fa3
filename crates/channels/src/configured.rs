//! The chat channels a config asks for, built with the adapters this
//! binary was compiled with.

use std::path::Path;
use std::sync::Arc;

use flynn_protocol::config::ChannelsConfig;

use crate::ChannelAdapter;

/// What became of one configured channel.
pub enum Built {
    /// Ready to start.
    Adapter(Arc<dyn ChannelAdapter>),
    /// Configured, but it cannot run; the reason says what to do.
    Unavailable(String),
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Built::Adapter(adapter) => write!(f, "Adapter({})", adapter.name()),
            Built::Unavailable(reason) => write!(f, "Unavailable({reason})"),
        }
    }
}

#[cfg_attr(
    all(
        feature = "telegram",
        feature = "discord",
        feature = "slack",
        feature = "whatsapp"
    ),
    expect(dead_code, reason = "every adapter is built in")
)]
fn not_built(name: &str) -> Built {
    Built::Unavailable(format!(
        "channels.{name} is configured, but this build of Flynn has no {name} support; it was left out of this build: rebuild with the default features (`cargo install --path bins/flynn-daemon`), or add `--features {name}` to a `--no-default-features` build"
    ))
}

/// Where the Discord adapter keeps its gateway session, under
/// `FLYNN_HOME`.
pub const DISCORD_STATE: &str = "channels/discord.json";

/// Every enabled channel of `config`, by name, in a fixed order; state an
/// adapter keeps across restarts goes under `home` (`FLYNN_HOME`).
pub fn build(config: &ChannelsConfig, home: &Path) -> Vec<(&'static str, Built)> {
    let mut built = Vec::new();
    if let Some(c) = config.telegram.as_ref().filter(|c| c.enabled) {
        #[cfg(feature = "telegram")]
        built.push((
            "telegram",
            match crate::telegram::TelegramAdapter::new(c) {
                Ok(adapter) => Built::Adapter(Arc::new(adapter)),
                Err(e) => Built::Unavailable(e.to_string()),
            },
        ));
        #[cfg(not(feature = "telegram"))]
        {
            let _ = c;
            built.push(("telegram", not_built("telegram")));
        }
    }
    if let Some(c) = config.discord.as_ref().filter(|c| c.enabled) {
        #[cfg(feature = "discord")]
        built.push((
            "discord",
            match crate::discord::DiscordAdapter::new(c) {
                Ok(adapter) => {
                    Built::Adapter(Arc::new(adapter.with_state_file(home.join(DISCORD_STATE))))
                }
                Err(e) => Built::Unavailable(e.to_string()),
            },
        ));
        #[cfg(not(feature = "discord"))]
        {
            let _ = (c, home);
            built.push(("discord", not_built("discord")));
        }
    }
    if let Some(c) = config.slack.as_ref().filter(|c| c.enabled) {
        #[cfg(feature = "slack")]
        built.push((
            "slack",
            match crate::slack::SlackAdapter::new(c) {
                Ok(adapter) => Built::Adapter(Arc::new(adapter)),
                Err(e) => Built::Unavailable(e.to_string()),
            },
        ));
        #[cfg(not(feature = "slack"))]
        {
            let _ = c;
            built.push(("slack", not_built("slack")));
        }
    }
    if let Some(c) = config.whatsapp.as_ref().filter(|c| c.enabled) {
        #[cfg(feature = "whatsapp")]
        built.push((
            "whatsapp",
            match crate::whatsapp::WhatsAppAdapter::new(c) {
                Ok(adapter) => Built::Adapter(Arc::new(adapter)),
                Err(e) => Built::Unavailable(e.to_string()),
            },
        ));
        #[cfg(not(feature = "whatsapp"))]
        {
            let _ = c;
            built.push(("whatsapp", not_built("whatsapp")));
        }
    }
    built
}
