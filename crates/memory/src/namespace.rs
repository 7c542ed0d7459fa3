//! Namespaces: the names memory files go by. `global`, `user`, `session`
//! (this conversation's notes), `daily` (today's note), or any relative
//! path such as `projects/flynn`; each is one markdown file under the
//! memory directory.

use std::fmt;
use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use flynn_protocol::SessionKey;

use crate::Error;

/// Longest namespace accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 128;
/// Deepest nesting of directories in a namespace.
const MAX_DEPTH: usize = 4;

/// A validated namespace: a relative path without the `.md` extension,
/// segments of letters, digits, `_`, `-` and `.` (not leading), joined by
/// `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(String);

/// What the short names `session` and `daily` stand for at the moment.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The conversation `session` refers to; without one `session` is
    /// refused.
    pub session: Option<SessionKey>,
    /// The date `daily` refers to.
    pub today: NaiveDate,
}

impl Scope {
    /// Today in the local time zone, and the given session.
    pub fn now(session: Option<SessionKey>) -> Self {
        Scope {
            session,
            today: chrono::Local::now().date_naive(),
        }
    }
}

impl Namespace {
    pub const GLOBAL: &str = "global";
    pub const USER: &str = "user";

    /// Resolves what a person or a model wrote: the short names `session`
    /// and `daily` through `scope`, anything else checked as a path. A
    /// trailing `.md` is accepted and dropped.
    pub fn resolve(name: &str, scope: &Scope) -> Result<Namespace, Error> {
        let name = name.trim();
        let name = name.strip_suffix(".md").unwrap_or(name);
        match name {
            "session" => match &scope.session {
                Some(session) => Ok(Namespace::of_session(session)),
                None => Err(Error::Namespace {
                    name: name.to_owned(),
                    problem: "there is no current session here; name it as sessions/<id>"
                        .to_owned(),
                }),
            },
            "daily" | "today" => Ok(Namespace::daily(scope.today)),
            _ => Namespace::parse(name),
        }
    }

    /// Checks a namespace written as a path (`projects/flynn`).
    pub fn parse(name: &str) -> Result<Namespace, Error> {
        let problem = |problem: &str| Error::Namespace {
            name: name.to_owned(),
            problem: problem.to_owned(),
        };
        if name.is_empty() {
            return Err(problem(
                "it is empty; expected global, user, session, daily or a path like projects/flynn",
            ));
        }
        if name.len() > MAX_NAMESPACE_LEN {
            return Err(problem(&format!(
                "it is longer than {MAX_NAMESPACE_LEN} bytes"
            )));
        }
        let segments: Vec<&str> = name.split('/').collect();
        if segments.len() > MAX_DEPTH {
            return Err(problem(&format!(
                "it is nested deeper than {MAX_DEPTH} levels"
            )));
        }
        for segment in &segments {
            if segment.is_empty() {
                return Err(problem(
                    "it has an empty path segment (a leading, trailing or double /)",
                ));
            }
            if segment.starts_with('.') {
                return Err(problem(
                    "a path segment starts with '.'; expected letters or digits",
                ));
            }
            if let Some(bad) = segment
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
            {
                return Err(problem(&format!(
                    "it contains {bad:?}; expected letters, digits, '_', '-', '.' and '/'"
                )));
            }
        }
        Ok(Namespace(name.to_owned()))
    }

    /// `sessions/<key>`, the key's `:` and other characters a file name
    /// should not have replaced by `_`.
    pub fn of_session(session: &SessionKey) -> Namespace {
        let file: String = session
            .as_str()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let file = file.trim_start_matches('.');
        let mut name = format!("sessions/{file}");
        name.truncate(MAX_NAMESPACE_LEN);
        Namespace(name)
    }

    /// `daily/<yyyy-mm-dd>`.
    pub fn daily(date: NaiveDate) -> Namespace {
        Namespace(format!("daily/{}", date.format("%Y-%m-%d")))
    }

    pub fn global() -> Namespace {
        Namespace(Self::GLOBAL.to_owned())
    }

    pub fn user() -> Namespace {
        Namespace(Self::USER.to_owned())
    }

    /// The namespace of a file, from its path relative to the memory
    /// directory; `None` for files that are not memory (not `.md`, or a
    /// name a namespace cannot have).
    pub fn from_relative(path: &Path) -> Option<Namespace> {
        let text = path.to_str()?;
        let text = text.strip_suffix(".md")?;
        let text = if std::path::MAIN_SEPARATOR == '/' {
            text.to_owned()
        } else {
            text.replace(std::path::MAIN_SEPARATOR, "/")
        };
        Namespace::parse(&text).ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The file's path relative to the memory directory.
    pub fn relative_path(&self) -> PathBuf {
        PathBuf::from(format!("{}.md", self.0))
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        Scope {
            session: Some(
                "telegram:42"
                    .parse::<SessionKey>()
                    .unwrap_or_else(|_| unreachable!()),
            ),
            today: NaiveDate::from_ymd_opt(2026, 11, 23).unwrap_or_default(),
        }
    }

    #[test]
    fn short_names_resolve_through_the_scope() {
        let scope = scope();
        let of = |name: &str| Namespace::resolve(name, &scope).map(|n| n.to_string());
        assert_eq!(of("global").ok().as_deref(), Some("global"));
        assert_eq!(of("user.md").ok().as_deref(), Some("user"));
        assert_eq!(of("session").ok().as_deref(), Some("sessions/telegram_42"));
        assert_eq!(of("daily").ok().as_deref(), Some("daily/2026-11-23"));
        assert_eq!(of("projects/flynn").ok().as_deref(), Some("projects/flynn"));
        let no_session = Scope {
            session: None,
            ..scope
        };
        assert!(Namespace::resolve("session", &no_session).is_err());
    }

    #[test]
    fn paths_that_leave_the_directory_are_refused() {
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "a//b",
            ".hidden",
            "a/../b",
            "a b",
            "",
            "a/b/c/d/e",
            "ü",
        ] {
            let error = Namespace::parse(bad).err();
            assert!(error.is_some(), "{bad:?} was accepted");
        }
        let error = Namespace::parse("notes/a b")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("' '") && error.contains("expected letters"),
            "{error}"
        );
    }

    #[test]
    fn files_map_back_to_namespaces() {
        let ns = Namespace::parse("projects/v1.2").unwrap_or_else(|_| unreachable!());
        assert_eq!(ns.relative_path(), PathBuf::from("projects/v1.2.md"));
        assert_eq!(Namespace::from_relative(&ns.relative_path()), Some(ns));
        assert_eq!(
            Namespace::from_relative(Path::new("user.md")),
            Some(Namespace::user())
        );
        assert_eq!(Namespace::from_relative(Path::new("notes.txt")), None);
        assert_eq!(Namespace::from_relative(Path::new(".git/x.md")), None);
    }
}
