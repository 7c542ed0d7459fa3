use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The name of a scheduled job: `morning-brief`. `cron.remove` takes it and
/// the job's turns run in the session `cron:<name>`, so it is one word of
/// 1 to [`JobName::MAX_LEN`] ASCII letters, digits, `-`, `_` or `.`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct JobName(String);

/// Why a string cannot name a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobNameError {
    /// The name as given.
    pub name: String,
    /// What is wrong with it: `empty`, `too long`, `has other characters`.
    pub reason: &'static str,
}

impl fmt::Display for JobNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job name '{}': {}; expected 1 to {} letters, digits, '-', '_' or '.' (`morning-brief`)",
            self.name,
            self.reason,
            JobName::MAX_LEN
        )
    }
}

impl std::error::Error for JobNameError {}

impl JobName {
    /// The longest name, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Checks `name` against the rule above.
    pub fn new(name: impl Into<String>) -> Result<JobName, JobNameError> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("empty")
        } else if name.len() > Self::MAX_LEN {
            Some("too long")
        } else if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            Some("has other characters")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(JobNameError { name, reason }),
            None => Ok(JobName(name)),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for JobName {
    type Err = JobNameError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        JobName::new(name)
    }
}

impl TryFrom<String> for JobName {
    type Error = JobNameError;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        JobName::new(name)
    }
}

impl From<JobName> for String {
    fn from(name: JobName) -> String {
        name.0
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for JobName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_word_of_safe_characters() {
        for good in ["morning-brief", "a", "v1.2_x", &"x".repeat(64)] {
            assert_eq!(JobName::new(good).unwrap().as_str(), good);
        }
        for (bad, reason) in [
            ("", "empty"),
            (&"x".repeat(65), "too long"),
            ("my job", "has other characters"),
            ("café", "has other characters"),
            ("a/b", "has other characters"),
        ] {
            assert_eq!(JobName::new(bad).unwrap_err().reason, reason, "{bad:?}");
        }
        assert_eq!(
            "my job".parse::<JobName>().unwrap_err().to_string(),
            "job name 'my job': has other characters; expected 1 to 64 letters, digits, '-', '_' or '.' (`morning-brief`)"
        );
    }

    #[test]
    fn serde_refuses_what_new_refuses() {
        let name: JobName = serde_json::from_str("\"nightly\"").unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"nightly\"");
        assert!(serde_json::from_str::<JobName>("\"two words\"").is_err());
    }
}
