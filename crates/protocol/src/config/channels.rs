//! The chat channels: each platform's keys and the access settings they share.

use super::*;

/// A platform's settings: its own keys, then the access keys every
/// channel shares (see [`ChannelAccess`]), inline in the same map.
macro_rules! channel_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident : $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )*
            /// Turns the channel off without removing its settings.
            #[serde(default = "yes")]
            pub enabled: bool,
            /// Sender ids always let in (the platform's user id, or a
            /// WhatsApp number in E.164 without `+`); `*` lets everyone in.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub allow_from: Vec<String>,
            /// What a direct message from a sender not allowed yet gets.
            #[serde(default)]
            pub dm_policy: DmPolicy,
            /// In groups, answer only messages that mention the bot (or
            /// reply to it). Direct messages never need a mention.
            #[serde(default = "yes")]
            pub require_mention: bool,
            /// Group (chat, channel) ids the bot answers in; empty: any
            /// group it is in. Senders in groups must still be allowed.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub allow_groups: Vec<String>,
            /// Settings of one group (by its id), or of every group (`*`),
            /// over the channel's own: `require_mention` per group.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub groups: BTreeMap<String, GroupSettings>,
            /// Messages one sender may send in a window before Flynn asks
            /// them to slow down.
            #[serde(default)]
            pub rate_limit: SenderRateLimit,
            /// Sender ids that are the owner: their messages have the
            /// owner's rights. Every other sender let in is a guest.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub owners: Vec<String>,
            /// The tools a guest's turn may use on this channel (within
            /// the agent's own); wins over the agent's `guest_tools`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub guest_tools: Option<ToolPolicyConfig>,
            /// Who answers the confirmations a guest's turn raises:
            /// `owner` (in the owner's direct chat, else the dashboard) or
            /// `requester` (the guest who asked, in its chat).
            #[serde(default)]
            pub guest_approvals: GuestApprovals,
        }

        impl $name {
            /// Who may talk to this channel.
            pub fn access(&self) -> ChannelAccess {
                ChannelAccess {
                    enabled: self.enabled,
                    allow_from: self.allow_from.clone(),
                    dm_policy: self.dm_policy,
                    require_mention: self.require_mention,
                    allow_groups: self.allow_groups.clone(),
                    groups: self.groups.clone(),
                    rate_limit: self.rate_limit,
                    owners: self.owners.clone(),
                    guest_tools: self.guest_tools.clone(),
                    guest_approvals: self.guest_approvals,
                }
            }
        }
    };
}

/// Chat platforms Flynn answers on. Each is optional; a configured one
/// starts with the daemon (when the binary was built with its cargo
/// feature).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelsConfig {
    /// Telegram bot (Bot API): long polling or a webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramConfig>,
    /// Discord bot: the gateway WebSocket and the REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discord: Option<DiscordConfig>,
    /// Slack app: Socket Mode or the Events API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackConfig>,
    /// WhatsApp Business number on the Cloud API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whatsapp: Option<WhatsAppConfig>,
}

impl ChannelsConfig {
    /// The configured channels' names and who may talk to them, in a
    /// fixed order.
    pub fn access(&self) -> Vec<(&'static str, ChannelAccess)> {
        let mut all = Vec::new();
        if let Some(c) = &self.telegram {
            all.push(("telegram", c.access()));
        }
        if let Some(c) = &self.discord {
            all.push(("discord", c.access()));
        }
        if let Some(c) = &self.slack {
            all.push(("slack", c.access()));
        }
        if let Some(c) = &self.whatsapp {
            all.push(("whatsapp", c.access()));
        }
        all
    }

    /// Every token and secret of every channel.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets = Vec::new();
        if let Some(c) = &self.telegram {
            secrets.push(c.bot_token.clone());
            secrets.extend(c.webhook_secret.clone());
        }
        if let Some(c) = &self.discord {
            secrets.push(c.bot_token.clone());
        }
        if let Some(c) = &self.slack {
            secrets.push(c.bot_token.clone());
            secrets.extend(c.app_token.clone());
            secrets.extend(c.signing_secret.clone());
        }
        if let Some(c) = &self.whatsapp {
            secrets.push(c.access_token.clone());
            secrets.push(c.app_secret.clone());
            secrets.push(c.verify_token.clone());
        }
        secrets.retain(|s| !s.is_empty());
        secrets
    }
}

/// Who may talk to a channel, and how much: the keys every platform's
/// settings share.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelAccess {
    pub enabled: bool,
    pub allow_from: Vec<String>,
    pub dm_policy: DmPolicy,
    pub require_mention: bool,
    pub allow_groups: Vec<String>,
    pub groups: BTreeMap<String, GroupSettings>,
    pub rate_limit: SenderRateLimit,
    pub owners: Vec<String>,
    pub guest_tools: Option<ToolPolicyConfig>,
    pub guest_approvals: GuestApprovals,
}

impl Default for ChannelAccess {
    fn default() -> Self {
        ChannelAccess {
            enabled: true,
            allow_from: Vec::new(),
            dm_policy: DmPolicy::default(),
            require_mention: true,
            allow_groups: Vec::new(),
            groups: BTreeMap::new(),
            rate_limit: SenderRateLimit::default(),
            owners: Vec::new(),
            guest_tools: None,
            guest_approvals: GuestApprovals::default(),
        }
    }
}

impl ChannelAccess {
    /// Whether a message in `group` must mention the bot: that group's
    /// `require_mention`, else `*`'s, else the channel's.
    pub fn mention_required(&self, group: &str) -> bool {
        self.groups
            .get(group)
            .and_then(|g| g.require_mention)
            .or_else(|| self.groups.get("*").and_then(|g| g.require_mention))
            .unwrap_or(self.require_mention)
    }
}

/// One group's settings (`channels.<name>.groups.<id>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupSettings {
    /// Answer only messages that mention the bot in this group; the
    /// channel's `require_mention` when absent.
    #[serde(
        default,
        alias = "requireMention",
        skip_serializing_if = "Option::is_none"
    )]
    pub require_mention: Option<bool>,
}

/// Who answers the confirmations a guest's turn raises.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuestApprovals {
    /// The owner: in the owner's direct chat on the channel (once the
    /// owner has written there since the daemon started), else on the
    /// dashboard.
    #[default]
    Owner,
    /// The guest who asked, in the chat it asked from.
    Requester,
}

/// What a direct message from an unknown sender gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DmPolicy {
    /// A pairing code the owner approves with `flynn pairing approve`.
    #[default]
    Pairing,
    /// Nothing: only `allow_from` and senders paired before get in.
    Allowlist,
    /// Anyone may talk to the bot.
    Open,
}

/// A per-sender message budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SenderRateLimit {
    /// Messages per window; 0 turns the limit off.
    #[serde(default = "default_sender_messages")]
    pub messages: u32,
    /// The window, in seconds.
    #[serde(default = "default_sender_window")]
    pub per_secs: u64,
}

impl Default for SenderRateLimit {
    fn default() -> Self {
        SenderRateLimit {
            messages: default_sender_messages(),
            per_secs: default_sender_window(),
        }
    }
}

fn default_sender_messages() -> u32 {
    20
}

fn default_sender_window() -> u64 {
    60
}

/// How the Telegram bot receives updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TelegramMode {
    /// `getUpdates` long polling: needs no public address.
    #[default]
    Polling,
    /// Telegram posts updates to `webhook_url`, which must reach this
    /// gateway's `/channels/telegram/webhook` over public HTTPS.
    Webhook,
}

channel_config! {
    /// A Telegram bot.
    pub struct TelegramConfig {
        /// The token @BotFather gave (`123456:ABC…`).
        pub bot_token: String,
        /// Long polling (default) or a webhook.
        #[serde(default)]
        pub mode: TelegramMode,
        /// Public HTTPS URL Telegram posts to in webhook mode; it must
        /// reach the gateway's `/channels/telegram/webhook`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub webhook_url: Option<String>,
        /// Secret Telegram sends back in `X-Telegram-Bot-Api-Secret-Token`
        /// (webhook mode; 1–256 characters of `A-Z a-z 0-9 _ -`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub webhook_secret: Option<String>,
        /// Bot API server (a self-hosted one, or a test fake).
        #[serde(default = "default_telegram_api")]
        pub api_url: String,
    }
}

fn default_telegram_api() -> String {
    "https://api.telegram.org".to_owned()
}

channel_config! {
    /// A Discord bot.
    pub struct DiscordConfig {
        /// The bot token from the Developer Portal (Bot → Reset Token).
        pub bot_token: String,
        /// REST API base (a test fake); Discord's own when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub api_url: Option<String>,
        /// Gateway WebSocket URL (a test fake); the one Discord names
        /// when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gateway_url: Option<String>,
        /// Servers (guild ids) the bot answers in; empty: any server it
        /// is in. Direct messages are not affected.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub allowed_guild_ids: Vec<String>,
    }
}

/// How the Slack app receives events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SlackMode {
    /// Socket Mode over a WebSocket Slack opens for the app (needs
    /// `app_token`, no public address).
    #[default]
    Socket,
    /// The Events API: Slack posts to the gateway's
    /// `/channels/slack/events`, signed with `signing_secret`.
    Events,
}

channel_config! {
    /// A Slack app.
    pub struct SlackConfig {
        /// Bot User OAuth Token (`xoxb-…`).
        pub bot_token: String,
        /// Socket Mode (default) or the Events API.
        #[serde(default)]
        pub mode: SlackMode,
        /// App-level token with `connections:write` (`xapp-…`), for
        /// Socket Mode.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub app_token: Option<String>,
        /// Signing secret (Basic Information → App Credentials), for the
        /// Events API.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub signing_secret: Option<String>,
        /// Web API base (a test fake).
        #[serde(default = "default_slack_api")]
        pub api_url: String,
    }
}

fn default_slack_api() -> String {
    "https://slack.com/api".to_owned()
}

channel_config! {
    /// A WhatsApp Business number on the Cloud API.
    pub struct WhatsAppConfig {
        /// A system user's permanent access token.
        pub access_token: String,
        /// The number's Phone number ID (not the number itself).
        pub phone_number_id: String,
        /// The app's secret: webhook posts are signed with it
        /// (`X-Hub-Signature-256`).
        pub app_secret: String,
        /// The token typed into the webhook settings; Meta sends it back
        /// in the verification handshake.
        pub verify_token: String,
        /// Graph API base (a test fake).
        #[serde(default = "default_graph_api")]
        pub api_url: String,
        /// Graph API version.
        #[serde(default = "default_graph_version")]
        pub api_version: String,
    }
}

fn default_graph_api() -> String {
    "https://graph.facebook.com".to_owned()
}

fn default_graph_version() -> String {
    "v23.0".to_owned()
}
