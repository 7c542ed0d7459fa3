//! Who sent a message, and so what its turn may do.
//!
//! Every turn carries a principal. The owner has every right the agent's
//! policy gives. A guest (a paired or allowlisted chat sender, anyone in
//! an open DM) is contained: its own session and memory, a narrower tool
//! policy, and nobody's confirmations but the owner's. Automation (cron,
//! heartbeat, webhooks) acts for the owner but what it brings is treated
//! as untrusted input.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who sent a message: stored with its turn, shown in history, on the
/// dashboard and in the audit log as `owner`, `guest:<channel>:<id>` or
/// `automation:<source>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub enum Principal {
    /// The CLI, an admin gateway token, a chat id in a channel's `owners`
    /// list (or promoted with `flynn pairing approve --owner`).
    #[default]
    Owner,
    /// A chat sender let in by pairing, `allow_from` or an open DM.
    Guest {
        /// The channel's name in config (`telegram`).
        channel: String,
        /// The platform's stable id of the sender.
        id: String,
    },
    /// A scheduled job, the heartbeat or a webhook: `cron:<job>`,
    /// `heartbeat`, `webhook:<name>`.
    Automation { source: String },
}

/// Why a string is not a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalError(pub String);

impl fmt::Display for PrincipalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid principal '{}' (expected 'owner', 'guest:<channel>:<id>' or 'automation:<source>')",
            self.0
        )
    }
}

impl std::error::Error for PrincipalError {}

impl Principal {
    pub fn guest(channel: impl Into<String>, id: impl Into<String>) -> Self {
        Principal::Guest {
            channel: channel.into(),
            id: id.into(),
        }
    }

    pub fn automation(source: impl Into<String>) -> Self {
        Principal::Automation {
            source: source.into(),
        }
    }

    pub fn is_owner(&self) -> bool {
        matches!(self, Principal::Owner)
    }

    pub fn is_guest(&self) -> bool {
        matches!(self, Principal::Guest { .. })
    }

    /// The memory namespace a guest's notes live in,
    /// `people/<channel>-<id>`; `None` for the owner and automation, whose
    /// memory is the owner's.
    pub fn memory_namespace(&self) -> Option<String> {
        match self {
            Principal::Guest { channel, id } => {
                let id: String = id
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                Some(format!("people/{channel}-{id}"))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Owner => f.write_str("owner"),
            Principal::Guest { channel, id } => write!(f, "guest:{channel}:{id}"),
            Principal::Automation { source } => write!(f, "automation:{source}"),
        }
    }
}

impl FromStr for Principal {
    type Err = PrincipalError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || PrincipalError(text.to_owned());
        if text == "owner" {
            return Ok(Principal::Owner);
        }
        if let Some(rest) = text.strip_prefix("guest:") {
            let (channel, id) = rest.split_once(':').ok_or_else(bad)?;
            if channel.is_empty() || id.is_empty() {
                return Err(bad());
            }
            return Ok(Principal::guest(channel, id));
        }
        if let Some(source) = text.strip_prefix("automation:")
            && !source.is_empty()
        {
            return Ok(Principal::automation(source));
        }
        Err(bad())
    }
}

impl TryFrom<String> for Principal {
    type Error = PrincipalError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<Principal> for String {
    fn from(principal: Principal) -> Self {
        principal.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_read_back_as_written() {
        for principal in [
            Principal::Owner,
            Principal::guest("telegram", "42"),
            Principal::guest("slack", "T1:U2"),
            Principal::automation("cron:daily"),
        ] {
            let text = principal.to_string();
            assert_eq!(text.parse::<Principal>(), Ok(principal));
        }
        for bad in [
            "",
            "guest",
            "guest:telegram",
            "guest::1",
            "automation:",
            "root",
        ] {
            let error = bad.parse::<Principal>().err();
            assert!(
                error.is_some_and(|e| e.to_string().contains("expected 'owner'")),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_guests_memory_is_its_own() {
        assert_eq!(Principal::Owner.memory_namespace(), None);
        assert_eq!(
            Principal::guest("telegram", "42").memory_namespace(),
            Some("people/telegram-42".to_owned())
        );
        assert_eq!(
            Principal::guest("slack", "T1:U2/..").memory_namespace(),
            Some("people/slack-T1_U2___".to_owned())
        );
    }
}
