use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A class of model calls, routed to an ordered list of models in config.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Cheap and quick: compaction, extraction, classification.
    Fast,
    /// Ordinary conversation.
    #[default]
    Default,
    /// Hard problems worth an expensive model.
    Complex,
    /// Work that must stay on a model the owner runs.
    Local,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Fast, Tier::Default, Tier::Complex, Tier::Local];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Fast => "fast",
            Tier::Default => "default",
            Tier::Complex => "complex",
            Tier::Local => "local",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tier name that is not one of `fast`, `default`, `complex`, `local`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTier(pub String);

impl fmt::Display for UnknownTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown tier '{}' (expected one of: fast, default, complex, local)",
            self.0
        )
    }
}

impl std::error::Error for UnknownTier {}

impl FromStr for Tier {
    type Err = UnknownTier;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Tier::ALL
            .into_iter()
            .find(|tier| tier.as_str() == s)
            .ok_or_else(|| UnknownTier(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_tier_and_rejects_others() {
        for tier in Tier::ALL {
            assert_eq!(tier.as_str().parse::<Tier>(), Ok(tier));
        }
        assert_eq!(
            "fastest".parse::<Tier>().map_err(|e| e.to_string()),
            Err("unknown tier 'fastest' (expected one of: fast, default, complex, local)".into())
        );
    }
}
