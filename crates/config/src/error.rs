//! What can go wrong while loading a configuration, as typed data.
//!
//! Every problem in a file is a [`Diagnostic`]: the file, the 1-based line
//! and column, the key path (`models.tiers.fast[0]`) and a [`Problem`]. It
//! prints as
//!
//! ```text
//! config.yaml:12:5: models.tiers.fast[0]: unknown provider 'anthropc' (did you mean 'anthropic'?), expected one of the configured providers: anthropic, local
//! ```

use std::fmt;
use std::path::PathBuf;

use flynn_protocol::config::MAIN_AGENT;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A config file named by `--config` or `FLYNN_CONFIG` does not exist.
    #[error("{}: no such config file", path.display())]
    NotFound { path: PathBuf },
    /// The config file exists but could not be read.
    #[error("{}: cannot read the config file: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid configuration. Holds at least one
    /// diagnostic, in the order they were found.
    #[error("{}", DiagnosticList(diagnostics))]
    Invalid { diagnostics: Vec<Diagnostic> },
    /// An environment variable holds something Flynn cannot use, e.g.
    /// `FLYNN_MODEL=gpt-4o` or `OPENAI_BASE_URL=localhost`.
    #[error("{name}: {problem}")]
    Env { name: String, problem: Problem },
    /// No directory to put the default paths under.
    #[error(
        "cannot find a home directory for {needed_for}: HOME is not set, expected HOME or {needed_for} to be set"
    )]
    NoHome { needed_for: &'static str },
    /// The default workspace (`FLYNN_HOME/workspace`) cannot be created.
    #[error(
        "cannot create the workspace {}: {source}; set tools.workspace to a directory Flynn may use",
        path.display()
    )]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A change to the file could not be made (a path that crosses a
    /// single value, a list item that does not exist).
    #[error("cannot change the config: {0}")]
    Edit(String),
    /// The profile overlay named by `FLYNN_PROFILE` (`--profile`) cannot
    /// be used.
    #[error("profile '{profile}': {problem}")]
    Profile { profile: String, problem: String },
    /// The file's `version` cannot be migrated, or a migration would lose
    /// part of it.
    #[error("cannot migrate the config: {0}")]
    Migrate(String),
    /// The changed file could not be written.
    #[error("{}: cannot write the config file: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The problems in the file, when the error is about its content.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            Error::Invalid { diagnostics } => diagnostics,
            _ => &[],
        }
    }

    pub(crate) fn invalid(diagnostic: Diagnostic) -> Self {
        Error::Invalid {
            diagnostics: vec![diagnostic],
        }
    }
}

struct DiagnosticList<'a>(&'a [Diagnostic]);

impl fmt::Display for DiagnosticList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

/// One problem at one place in a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// The file, as it was named (or the origin given to `parse_str`).
    pub path: PathBuf,
    /// 1-based line; 0 when the place is unknown.
    pub line: u64,
    /// 1-based column, counted in characters; 0 when the place is unknown.
    pub column: u64,
    /// Where in the document, e.g. `providers.local.base_url` or
    /// `models.tiers.fast[0]`; empty for the document as a whole.
    pub key_path: String,
    /// What was wrong and what was expected.
    pub problem: Problem,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        f.write_str(": ")?;
        if !self.key_path.is_empty() {
            write!(f, "{}: ", self.key_path)?;
        }
        write!(f, "{}", self.problem)
    }
}

/// What was wrong, as data. Its `Display` says what was wrong and what was
/// expected instead.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Problem {
    /// The text is not YAML.
    Syntax { message: String },
    /// A key this block does not have.
    UnknownKey {
        key: String,
        suggestion: Option<String>,
        expected: Vec<String>,
    },
    /// A value outside a fixed set, e.g. a provider kind. `what` names the
    /// set ("provider kind", "tier").
    UnknownValue {
        what: String,
        value: String,
        suggestion: Option<String>,
        expected: Vec<String>,
    },
    /// A value of the wrong type, both sides described for people.
    WrongType { found: String, expected: String },
    /// A key that must be present is not.
    MissingKey { key: String },
    /// The same key twice in one mapping.
    DuplicateKey { key: String },
    /// A `provider/model` reference to a provider that is not configured.
    UnknownProvider {
        name: String,
        suggestion: Option<String>,
        configured: Vec<String>,
    },
    /// `FLYNN_MODEL` names a well-known provider that is not configured and
    /// cannot be made from the environment either.
    ProviderUnavailable { name: String, variable: String },
    /// A provider name that model references could never name.
    InvalidProviderName { name: String },
    /// `${NAME}` names an unset variable and gives no default.
    UnsetVariable { name: String },
    /// A `${` that does not start a supported reference.
    InvalidReference { text: String },
    /// A provider kind that has no default endpoint was given none.
    MissingBaseUrl { kind: String },
    /// A base URL that is not `http(s)://host...`.
    InvalidUrl { url: String },
    /// A number below its minimum.
    TooSmall { value: u64, min: u64 },
    /// A number outside its range.
    OutOfRange { value: u64, min: u64, max: u64 },
    /// A `version` this Flynn cannot read.
    UnsupportedVersion { found: u64, supported: u32 },
    /// An agent name that `/agent`, `--agent` and routes could not use:
    /// empty, or with characters other than letters, digits, `-` and `_`.
    InvalidAgentName { name: String },
    /// An agent name used by an earlier entry of `agents.list`, which
    /// starts at `first_line`.
    DuplicateAgent { name: String, first_line: u64 },
    /// A reference to an agent that does not exist. `configured` holds the
    /// names in `agents.list`; when it is empty the only agent is the
    /// built-in `main`.
    UnknownAgent {
        name: String,
        suggestion: Option<String>,
        configured: Vec<String>,
    },
    /// An empty name glob; `example` is a glob that would fit there.
    EmptyPattern { example: String },
    /// Two keys that are alternatives to each other are both set.
    ConflictingKeys { key: String, other: String },
    /// A session store URL this build cannot open: `scheme` is the
    /// lowercased text before the first `:`, `None` when the text is not a
    /// URL at all. The URL itself is not kept: it may hold a password.
    InvalidSessionsUrl { scheme: Option<String> },
    /// Any other message, e.g. from a type's own parser.
    Other { message: String },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Syntax { message } => write!(f, "invalid YAML: {message}"),
            Problem::UnknownKey {
                key,
                suggestion,
                expected,
            } => {
                write!(f, "unknown key '{key}'{}, ", DidYouMean(suggestion))?;
                if expected.is_empty() {
                    f.write_str("expected no keys here")
                } else {
                    write!(f, "expected one of: {}", expected.join(", "))
                }
            }
            Problem::UnknownValue {
                what,
                value,
                suggestion,
                expected,
            } => write!(
                f,
                "unknown {what} '{value}'{}, expected one of: {}",
                DidYouMean(suggestion),
                expected.join(", ")
            ),
            Problem::WrongType { found, expected } => {
                write!(f, "found {found}, expected {expected}")
            }
            Problem::MissingKey { key } => {
                write!(f, "missing key '{key}', expected it in this block")
            }
            Problem::DuplicateKey { key } => {
                write!(f, "duplicate key '{key}', expected each key once")
            }
            Problem::UnknownProvider {
                name,
                suggestion,
                configured,
            } => {
                write!(f, "unknown provider '{name}'{}, ", DidYouMean(suggestion))?;
                if configured.is_empty() {
                    f.write_str("expected a provider configured under 'providers' (none are)")
                } else {
                    write!(
                        f,
                        "expected one of the configured providers: {}",
                        configured.join(", ")
                    )
                }
            }
            Problem::ProviderUnavailable { name, variable } => write!(
                f,
                "provider '{name}' is not configured and {variable} is not set, expected {variable} in the environment or '{name}' under 'providers'"
            ),
            Problem::InvalidProviderName { name } => write!(
                f,
                "invalid provider name '{name}', expected a name without '/' or spaces"
            ),
            Problem::UnsetVariable { name } => write!(
                f,
                "environment variable {name} is not set, expected it to be set or a default as in ${{{name}:-default}}"
            ),
            Problem::InvalidReference { text } => write!(
                f,
                "unsupported reference '{text}', expected ${{NAME}} or ${{NAME:-default}} (write $${{ for a literal ${{)"
            ),
            Problem::MissingBaseUrl { kind } => write!(
                f,
                "a provider of kind '{kind}' needs a base_url, expected e.g. base_url: http://127.0.0.1:8080/v1"
            ),
            Problem::InvalidUrl { url } => write!(
                f,
                "invalid URL '{url}', expected an http:// or https:// URL with a host"
            ),
            Problem::TooSmall { value, min } => {
                write!(f, "{value} is too small, expected at least {min}")
            }
            Problem::OutOfRange { value, min, max } => {
                write!(f, "{value} is out of range, expected {min} to {max}")
            }
            Problem::UnsupportedVersion { found, supported } => {
                if *found > u64::from(*supported) {
                    write!(
                        f,
                        "config version {found} is newer than this Flynn understands, expected version {supported} or lower (upgrade Flynn to use this file)"
                    )
                } else if *found >= 1 {
                    write!(
                        f,
                        "config version {found} is older than this Flynn's, expected version {supported} (run `flynn config migrate`, which keeps a backup)"
                    )
                } else {
                    write!(
                        f,
                        "config version {found} does not exist, expected version {supported}"
                    )
                }
            }
            Problem::InvalidAgentName { name } if name.is_empty() => {
                f.write_str("empty agent name, expected a name of letters, digits, '-' and '_'")
            }
            Problem::InvalidAgentName { name } => write!(
                f,
                "invalid agent name '{name}', expected only letters, digits, '-' and '_'"
            ),
            Problem::DuplicateAgent { name, first_line } => write!(
                f,
                "duplicate agent name '{name}' (first at line {first_line}), expected each agent name once"
            ),
            Problem::UnknownAgent {
                name,
                suggestion,
                configured,
            } => {
                write!(f, "unknown agent '{name}'{}, ", DidYouMean(suggestion))?;
                if configured.is_empty() {
                    write!(
                        f,
                        "expected '{MAIN_AGENT}' (the only agent while agents.list is empty)"
                    )
                } else {
                    write!(
                        f,
                        "expected one of the agents in agents.list: {}",
                        configured.join(", ")
                    )
                }
            }
            Problem::EmptyPattern { example } => write!(
                f,
                "empty pattern, expected a name or a glob such as '{example}'"
            ),
            Problem::ConflictingKeys { key, other } => write!(
                f,
                "'{key}' and '{other}' cannot both be set, expected only one of them: keep one and remove the other"
            ),
            Problem::InvalidSessionsUrl { scheme } => match scheme.as_deref() {
                None => write!(
                    f,
                    "not a URL, expected {SQLITE_URL_FORMS} (a plain file path goes in sessions.database)"
                ),
                Some("sqlite") => write!(
                    f,
                    "a SQLite URL is 'sqlite://' and a file path, expected {SQLITE_URL_FORMS}"
                ),
                Some("postgres" | "postgresql") => write!(
                    f,
                    "a PostgreSQL URL is 'postgres://' and a server, expected {POSTGRES_URL_FORM}"
                ),
                Some(scheme) => write!(
                    f,
                    "unsupported URL scheme '{scheme}:', expected {SQLITE_URL_FORMS}, or {POSTGRES_URL_FORM}"
                ),
            },
            Problem::Other { message } => f.write_str(message),
        }
    }
}

/// The session store URLs this build opens, for messages.
const SQLITE_URL_FORMS: &str = "sqlite:///absolute/path.db or sqlite://relative/path.db";
const POSTGRES_URL_FORM: &str = "postgres://user:password@host:5432/database";

struct DidYouMean<'a>(&'a Option<String>);

impl fmt::Display for DidYouMean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(suggestion) => write!(f, " (did you mean '{suggestion}'?)"),
            None => Ok(()),
        }
    }
}

/// The candidate closest to `input`, if any is close enough to be a
/// plausible typo.
pub(crate) fn did_you_mean<'a, I>(input: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(input, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_candidates_only() {
        let kinds = [
            "anthropic",
            "openai",
            "openai-compatible",
            "ollama",
            "gemini",
        ];
        assert_eq!(
            did_you_mean("antropic", kinds),
            Some("anthropic".to_owned())
        );
        assert_eq!(
            did_you_mean("openai-compatable", kinds),
            Some("openai-compatible".to_owned())
        );
        assert_eq!(did_you_mean("mistral", kinds), None);
    }

    #[test]
    fn diagnostic_omits_unknown_parts() {
        let diagnostic = Diagnostic {
            path: PathBuf::from("config.yaml"),
            line: 0,
            column: 0,
            key_path: String::new(),
            problem: Problem::Other {
                message: "boom".to_owned(),
            },
        };
        assert_eq!(diagnostic.to_string(), "config.yaml: boom");
    }
}
