//! Checks that need the whole config: references between blocks, URLs,
//! minimums, the schema version.

use flynn_protocol::Tier;
use flynn_protocol::config::{CONFIG_VERSION, FlynnConfig, ModelRef, ProviderKind};

use crate::document::{Document, KeyPath, Located, NodeKind};
use crate::error::{Problem, did_you_mean};

/// Refuses a file whose `version` is newer (or older) than this Flynn
/// reads, before anything else: a newer file's other keys may not make
/// sense to this version, and "unknown key" would hide the real problem.
pub(crate) fn check_version(doc: &Document<'_>) -> Result<(), Located> {
    let NodeKind::Map(entries) = &doc.root.kind else {
        return Ok(());
    };
    let Some((_, node)) = entries.iter().find(|(key, _)| key.text == "version") else {
        return Ok(());
    };
    match node.kind {
        NodeKind::Int(found) if found != i128::from(CONFIG_VERSION) && found >= 0 => Err(Located {
            problem: Box::new(Problem::UnsupportedVersion {
                found: u64::try_from(found).unwrap_or(u64::MAX),
                supported: CONFIG_VERSION,
            }),
            line: node.line,
            column: node.column,
            key_path: KeyPath::keys(&["version"]),
        }),
        _ => Ok(()),
    }
}

/// Every problem in a parsed config, in file order.
pub(crate) fn validate(config: &FlynnConfig, doc: &Document<'_>) -> Vec<Located> {
    let mut problems = Vec::new();
    let mut report = |path: KeyPath, problem: Problem| {
        let (line, column) = doc.locate(&path);
        problems.push(Located {
            problem: Box::new(problem),
            line,
            column,
            key_path: path,
        });
    };

    if config.version != CONFIG_VERSION {
        report(
            KeyPath::keys(&["version"]),
            Problem::UnsupportedVersion {
                found: config.version.into(),
                supported: CONFIG_VERSION,
            },
        );
    }

    for (name, provider) in &config.providers {
        let path = KeyPath::keys(&["providers"]).key(name);
        if !is_provider_name(name) {
            report(
                path.clone(),
                Problem::InvalidProviderName { name: name.clone() },
            );
        }
        match &provider.base_url {
            None if provider.kind == ProviderKind::OpenaiCompatible => report(
                path,
                Problem::MissingBaseUrl {
                    kind: provider.kind.to_string(),
                },
            ),
            Some(url) if !is_http_url(url) => {
                report(
                    path.key("base_url"),
                    Problem::InvalidUrl { url: url.clone() },
                );
            }
            _ => {}
        }
    }

    let configured: Vec<String> = config.providers.keys().cloned().collect();
    let mut check_refs = |path: KeyPath, models: &[ModelRef]| {
        for (index, model) in models.iter().enumerate() {
            if let Some(problem) = unknown_provider(model.provider(), &configured) {
                report(path.index(index), problem);
            }
        }
    };
    for tier in Tier::ALL {
        check_refs(
            KeyPath::keys(&["models", "tiers", tier.as_str()]),
            config.models.tiers.get(tier),
        );
    }
    check_refs(
        KeyPath::keys(&["models", "fallback"]),
        &config.models.fallback,
    );

    if config.agents.max_iterations < 1 {
        report(
            KeyPath::keys(&["agents", "max_iterations"]),
            Problem::TooSmall {
                value: config.agents.max_iterations.into(),
                min: 1,
            },
        );
    }
    const MIN_OUTPUT_LIMIT: u64 = 1024;
    let output_limit = u64::try_from(config.tools.output_limit_bytes).unwrap_or(u64::MAX);
    if output_limit < MIN_OUTPUT_LIMIT {
        report(
            KeyPath::keys(&["tools", "output_limit_bytes"]),
            Problem::TooSmall {
                value: output_limit,
                min: MIN_OUTPUT_LIMIT,
            },
        );
    }

    let retry = &config.models.retry;
    if retry.max_backoff_ms < retry.initial_backoff_ms {
        report(
            KeyPath::keys(&["models", "retry", "max_backoff_ms"]),
            Problem::TooSmall {
                value: retry.max_backoff_ms,
                min: retry.initial_backoff_ms,
            },
        );
    }
    for (model, price) in &config.models.prices {
        let rates = [
            ("input_per_mtok", Some(price.input_per_mtok)),
            ("output_per_mtok", Some(price.output_per_mtok)),
            ("cache_read_per_mtok", price.cache_read_per_mtok),
            ("cache_write_per_mtok", price.cache_write_per_mtok),
        ];
        for (key, rate) in rates {
            if let Some(rate) = rate
                && !(rate.is_finite() && rate >= 0.0)
            {
                report(
                    KeyPath::keys(&["models", "prices"]).key(model).key(key),
                    Problem::Other {
                        message: format!(
                            "price {rate} is not a price, expected a number of USD per million tokens, 0 or more"
                        ),
                    },
                );
            }
        }
    }

    problems.sort_by_key(|p| (p.line, p.column));
    problems
}

/// `Some(problem)` when `name` is not among the `configured` providers.
pub(crate) fn unknown_provider(name: &str, configured: &[String]) -> Option<Problem> {
    if configured.iter().any(|c| c == name) {
        return None;
    }
    Some(Problem::UnknownProvider {
        name: name.to_owned(),
        suggestion: did_you_mean(name, configured.iter().map(String::as_str)),
        configured: configured.to_vec(),
    })
}

/// A name `provider/model` references can use.
fn is_provider_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && !name.chars().any(char::is_whitespace)
}

/// `http://` or `https://`, then a host, optionally a numeric port, then
/// anything.
pub(crate) fn is_http_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let rest = match (
        lower.strip_prefix("https://"),
        lower.strip_prefix("http://"),
    ) {
        (Some(rest), _) | (None, Some(rest)) => rest,
        (None, None) => return false,
    };
    if rest.chars().any(char::is_whitespace) {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        match bracketed.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return false,
        }
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    !host.is_empty()
        && port.is_none_or(|port| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls_need_a_scheme_and_a_host() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "https://api.openai.com/v1",
            "HTTPS://Example.org",
            "http://[::1]:11434/v1",
            "http://user:pw@host:1/x?y#z",
            "http://localhost",
        ] {
            assert!(is_http_url(url), "{url}");
        }
        for url in [
            "localhost:8080",
            "ftp://example.org",
            "http://",
            "http:///v1",
            "http://host:port/v1",
            "http://host:/v1",
            "http://exa mple.org",
            "http://[::1",
        ] {
            assert!(!is_http_url(url), "{url}");
        }
    }
}
