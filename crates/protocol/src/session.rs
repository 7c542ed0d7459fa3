use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Identifies a conversation: `channel:peer`, e.g. `cli:default` or
/// `telegram:12345`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct SessionKey(String);

/// Why a string is not a valid session key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKeyError {
    pub key: String,
    pub reason: &'static str,
}

impl fmt::Display for SessionKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid session key '{}': {} (expected 'channel:peer', e.g. 'cli:default')",
            self.key, self.reason
        )
    }
}

impl std::error::Error for SessionKeyError {}

impl SessionKey {
    /// Longest key accepted, in bytes.
    pub const MAX_LEN: usize = 256;

    pub fn new(channel: &str, peer: &str) -> Result<Self, SessionKeyError> {
        format!("{channel}:{peer}").parse()
    }

    /// The key a person means by `text`: `channel:peer` as it is, and a
    /// bare name (no `:`) as `channel`'s own session, so that `work` given
    /// to the CLI is `cli:work`. The error's key is `text` as given.
    pub fn named(text: &str, channel: &str) -> Result<Self, SessionKeyError> {
        if text.contains(':') {
            return text.parse();
        }
        if text.is_empty() {
            return Err(SessionKeyError {
                key: String::new(),
                reason: "empty session name",
            });
        }
        format!("{channel}:{text}")
            .parse()
            .map_err(|e: SessionKeyError| SessionKeyError {
                key: text.to_owned(),
                reason: e.reason,
            })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn channel(&self) -> &str {
        self.0.split_once(':').map_or("", |(channel, _)| channel)
    }

    pub fn peer(&self) -> &str {
        self.0.split_once(':').map_or("", |(_, peer)| peer)
    }
}

impl FromStr for SessionKey {
    type Err = SessionKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |reason| {
            Err(SessionKeyError {
                key: s.to_owned(),
                reason,
            })
        };
        if s.len() > Self::MAX_LEN {
            return fail("longer than 256 bytes");
        }
        if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return fail("contains whitespace or control characters");
        }
        match s.split_once(':') {
            None => fail("missing ':' between channel and peer"),
            Some(("", _)) => fail("empty channel"),
            Some((_, "")) => fail("empty peer"),
            Some((channel, _))
                if !channel
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                fail("channel may use only letters, digits, '-' and '_'")
            }
            Some(_) => Ok(SessionKey(s.to_owned())),
        }
    }
}

impl TryFrom<String> for SessionKey {
    type Error = SessionKeyError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<SessionKey> for String {
    fn from(key: SessionKey) -> Self {
        key.0
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_channel_and_peer() {
        let key: SessionKey = "telegram:123:456"
            .parse()
            .unwrap_or_else(|_| unreachable!());
        assert_eq!((key.channel(), key.peer()), ("telegram", "123:456"));
    }

    #[test]
    fn rejects_malformed_keys() {
        for (input, reason) in [
            ("nocolon", "missing ':' between channel and peer"),
            (":peer", "empty channel"),
            ("cli:", "empty peer"),
            ("a b:c", "contains whitespace or control characters"),
            (
                "c.li:x",
                "channel may use only letters, digits, '-' and '_'",
            ),
        ] {
            assert_eq!(
                input.parse::<SessionKey>().map_err(|e| e.reason),
                Err(reason),
                "{input}"
            );
        }
    }
}
