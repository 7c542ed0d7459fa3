//! Keeps secrets out of what Flynn writes down: the configured keys and
//! tokens are replaced wherever they appear, and well-known credential
//! shapes (`sk-…`, `ghp_…`, `Bearer …`, `password=…`) too in the audit log
//! and the logs.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde_json::Value;

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not redacted by value: replacing a
/// three-letter word everywhere would garble output and protect nothing.
const MIN_SECRET_LEN: usize = 6;

/// Credential shapes that are redacted even when nobody configured them.
static CREDENTIALS: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?x)",
        r"\b(?:sk|rk|pk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{16,}",
        r"|\bgh[pousr]_[A-Za-z0-9]{20,}",
        r"|\bgithub_pat_[A-Za-z0-9_]{20,}",
        r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}",
        r"|\bAKIA[0-9A-Z]{16}\b",
        r"|\bAIza[0-9A-Za-z_\-]{35}",
        r"|\btvly-[A-Za-z0-9\-]{16,}",
        r"|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{16,}",
        r"|(?i:api[_-]?key|token|secret|password|passwd)[\x22']?\s*[:=]\s*[\x22']?[^\s\x22',;&]{4,}",
    ))
    .ok()
});

/// Object keys whose values are secrets whatever they look like.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('-', "_");
    matches!(
        key.as_str(),
        "api_key" | "apikey" | "token" | "access_token" | "secret" | "password" | "authorization"
    )
}

/// Replaces known secrets (and, for records, credential shapes) in text.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Arc<[String]>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// Redacts these values (API keys, tokens from the config); short and
    /// empty ones are ignored.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(|s| s.as_ref().trim().to_owned())
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so a secret containing another goes whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor {
            secrets: secrets.into(),
        }
    }

    /// `text` with every configured secret replaced: what the model and
    /// error messages may show.
    pub fn known<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }

    /// `text` with configured secrets and credential shapes replaced: what
    /// the audit log and the logs may keep.
    pub fn all<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let known = self.known(text);
        match CREDENTIALS.as_ref() {
            Some(pattern) if pattern.is_match(&known) => {
                Cow::Owned(pattern.replace_all(&known, REDACTED).into_owned())
            }
            _ => known,
        }
    }

    /// A JSON value with [`all`](Self::all) applied to every string, and
    /// the values of secret-named keys (`api_key`, `token`, `password`…)
    /// replaced whole.
    pub fn json(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.all(s).into_owned()),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, v)| {
                        let v = if is_secret_key(key) && !v.is_null() {
                            Value::String(REDACTED.to_owned())
                        } else {
                            self.json(v)
                        };
                        (key.clone(), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// Words in a variable's name that make its value a secret.
const SECRET_NAME_WORDS: [&str; 7] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
];

/// Variables whose names look secret but which hold paths or addresses.
const NOT_SECRET: [&str; 3] = ["SSH_AUTH_SOCK", "XAUTHORITY", "GPG_AGENT_INFO"];

/// The values of the secret-looking variables among `vars` (a process
/// environment): names with `KEY`, `TOKEN`, `SECRET`, `PASSWORD`,
/// `CREDENTIAL` or `AUTH` in them, whose value is at least 8 characters
/// and not a path. `FLYNN_GATEWAY_TOKEN`, `TELEGRAM_BOT_TOKEN` and
/// `ANTHROPIC_API_KEY` are caught whether or not the config names them.
pub fn env_secrets(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<String> {
    vars.into_iter()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, value)| {
            let upper = name.to_ascii_uppercase();
            SECRET_NAME_WORDS.iter().any(|word| upper.contains(word))
                && !NOT_SECRET.contains(&upper.as_str())
                && value.trim().len() >= 8
                && !value.starts_with('/')
        })
        .map(|(_, value)| value)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configured_secrets_are_replaced_wherever_they_appear() {
        let redactor = Redactor::new(["s3cr3t-value-123", "abc", ""]);
        assert_eq!(
            redactor.known("key=s3cr3t-value-123; again s3cr3t-value-123"),
            "key=[REDACTED]; again [REDACTED]"
        );
        // Too short to redact by value.
        assert_eq!(redactor.known("abc"), "abc");
        assert!(matches!(redactor.known("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn secret_looking_variables_of_the_environment_are_secrets() {
        let vars = [
            ("FLYNN_GATEWAY_TOKEN", "0123456789abcdef"),
            ("TELEGRAM_BOT_TOKEN", "123456:ABCdefGHIjkl"),
            ("ANTHROPIC_API_KEY", "sk-ant-0123456789"),
            ("db_password", "hunter2hunter2"),
            ("SHORT_TOKEN", "abc"),
            ("SSH_AUTH_SOCK", "agent-socket-name"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/home/me/.aws/credentials"),
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "en_US.UTF-8"),
        ]
        .map(|(name, value)| (name.into(), value.into()));
        assert_eq!(
            env_secrets(vars),
            [
                "0123456789abcdef",
                "123456:ABCdefGHIjkl",
                "sk-ant-0123456789",
                "hunter2hunter2"
            ]
        );
    }

    #[test]
    fn credential_shapes_are_replaced_in_records() {
        let redactor = Redactor::default();
        let cases = [
            (
                "export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234",
                "export OPENAI_[REDACTED]",
            ),
            (
                "key sk-proj-abcdefghijklmnop1234 here",
                "key [REDACTED] here",
            ),
            (
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
                "Authorization: [REDACTED]",
            ),
            (
                "token ghp_0123456789abcdefghijABCDEFGHIJ",
                "token [REDACTED]",
            ),
            ("AKIAIOSFODNN7EXAMPLE is an id", "[REDACTED] is an id"),
            ("password: hunter22 ok", "[REDACTED] ok"),
            ("plain words stay", "plain words stay"),
        ];
        for (input, expected) in cases {
            assert_eq!(redactor.all(input), expected, "{input}");
        }
    }

    #[test]
    fn json_redacts_strings_and_secret_keys() {
        let redactor = Redactor::new(["very-secret-key"]);
        let value = json!({
            "command": "curl -H 'x: very-secret-key' example.com",
            "api_key": "anything",
            "nested": [{"token": 42}, "ok"],
        });
        assert_eq!(
            redactor.json(&value),
            json!({
                "command": "curl -H 'x: [REDACTED]' example.com",
                "api_key": "[REDACTED]",
                "nested": [{"token": "[REDACTED]"}, "ok"],
            })
        );
    }
}
