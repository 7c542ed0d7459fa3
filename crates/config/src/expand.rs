//! `${VAR}` and `${VAR:-default}` in string values.
//!
//! The rules (also in the crate docs):
//! - `${NAME}` is the variable's value; an unset variable is an error. A
//!   variable set to the empty string expands to the empty string.
//! - `${NAME:-default}` is the variable's value when it is set and not
//!   empty, `default` otherwise. The default is taken literally (no nested
//!   references) and runs up to the first `}`.
//! - `$${` is a literal `${`; any other `$` is kept as it is.
//! - `NAME` is `[A-Za-z_][A-Za-z0-9_]*`; other forms (`${NAME-x}`,
//!   `${NAME:?x}`, a `${` without `}`) are errors.

use crate::env::Env;
use crate::error::Problem;

/// A value after expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expansion {
    pub text: String,
    /// Whether the value contained at least one `${...}` reference.
    pub had_reference: bool,
}

/// A reference that could not be expanded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExpandError {
    pub problem: Box<Problem>,
    /// The reference as written (`${NAME}`), to find it in the source.
    pub reference: String,
    /// How many identical references precede it in the value.
    pub occurrence: usize,
}

/// Whether `input` needs [`expand`] at all.
pub(crate) fn has_dollar_brace(input: &str) -> bool {
    input.contains("${")
}

/// Expands every reference in `input` from `env`.
pub(crate) fn expand(input: &str, env: &dyn Env) -> Result<Expansion, ExpandError> {
    let mut text = String::with_capacity(input.len());
    let mut had_reference = false;
    let mut i = 0;
    while let Some(found) = input[i..].find('$') {
        let at = i + found;
        text.push_str(&input[i..at]);
        let tail = &input[at..];
        if tail.starts_with("$${") {
            text.push_str("${");
            i = at + 3;
            continue;
        }
        if !tail.starts_with("${") {
            text.push('$');
            i = at + 1;
            continue;
        }
        let error = |problem: Problem, reference: &str| ExpandError {
            problem: Box::new(problem),
            reference: reference.to_owned(),
            occurrence: input[..at].matches(reference).count(),
        };
        let Some(close) = tail.find('}') else {
            let shown: String = tail.chars().take(40).collect();
            return Err(error(
                Problem::InvalidReference {
                    text: shown.clone(),
                },
                &shown,
            ));
        };
        let reference = &tail[..=close];
        let body = &tail[2..close];
        let (name, default) = match body.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (body, None),
        };
        if !is_name(name) {
            return Err(error(
                Problem::InvalidReference {
                    text: reference.to_owned(),
                },
                reference,
            ));
        }
        had_reference = true;
        match (env.var(name), default) {
            (Some(value), _) if !value.is_empty() => text.push_str(&value),
            (_, Some(default)) => text.push_str(default),
            (Some(_empty), None) => {}
            (None, None) => {
                return Err(error(
                    Problem::UnsetVariable {
                        name: name.to_owned(),
                    },
                    reference,
                ));
            }
        }
        i = at + close + 1;
    }
    text.push_str(&input[i..]);
    Ok(Expansion {
        text,
        had_reference,
    })
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::env::MapEnv;

    fn env() -> MapEnv {
        MapEnv::new()
            .with("KEY", "sk-123")
            .with("EMPTY", "")
            .with("HOST", "example.org")
    }

    fn ok(input: &str) -> (String, bool) {
        let expansion = expand(input, &env()).unwrap();
        (expansion.text, expansion.had_reference)
    }

    #[test]
    fn expands_set_variables_anywhere_in_the_value() {
        assert_eq!(ok("${KEY}"), ("sk-123".to_owned(), true));
        assert_eq!(
            ok("https://${HOST}:8443/v1"),
            ("https://example.org:8443/v1".to_owned(), true)
        );
        assert_eq!(ok("${KEY}${HOST}"), ("sk-123example.org".to_owned(), true));
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(ok("${MISSING:-fallback}"), ("fallback".to_owned(), true));
        assert_eq!(ok("${EMPTY:-fallback}"), ("fallback".to_owned(), true));
        assert_eq!(ok("${KEY:-fallback}"), ("sk-123".to_owned(), true));
        assert_eq!(ok("${MISSING:-}"), (String::new(), true));
        assert_eq!(ok("${MISSING:-a:-b}"), ("a:-b".to_owned(), true));
        assert_eq!(ok("${EMPTY}"), (String::new(), true));
    }

    #[test]
    fn dollar_dollar_brace_is_a_literal_and_other_dollars_stay() {
        assert_eq!(ok("$${KEY}"), ("${KEY}".to_owned(), false));
        assert_eq!(ok("pa$$word$"), ("pa$$word$".to_owned(), false));
        assert_eq!(ok("$KEY"), ("$KEY".to_owned(), false));
        assert_eq!(ok("no references"), ("no references".to_owned(), false));
    }

    #[test]
    fn unset_variable_without_default_is_an_error() {
        assert_eq!(
            expand("${KEY} ${MISSING} ${MISSING}", &env()),
            Err(ExpandError {
                problem: Box::new(Problem::UnsetVariable {
                    name: "MISSING".to_owned()
                }),
                reference: "${MISSING}".to_owned(),
                occurrence: 0,
            })
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        for (input, text) in [
            ("${}", "${}"),
            ("${1X}", "${1X}"),
            ("${X-default}", "${X-default}"),
            ("${X:?required}", "${X:?required}"),
            ("abc ${UNTERMINATED", "${UNTERMINATED"),
        ] {
            assert_eq!(
                expand(input, &env()).map_err(|e| *e.problem),
                Err(Problem::InvalidReference {
                    text: text.to_owned()
                }),
                "{input}"
            );
        }
    }
}
