use flynn_core::config::{self, ProcessEnv, Source};

use crate::cli::{ConfigArgs, ConfigCommand};
use crate::exit::Failure;

pub fn run(args: ConfigArgs) -> Result<(), Failure> {
    match args.command {
        ConfigCommand::Validate { file } => {
            let loaded = config::load(file.as_deref(), &ProcessEnv)?;
            match loaded.source {
                Source::File(path) => outln!("{}: ok", path.display()),
                Source::Environment => outln!(
                    "no config file at {}: using the environment, ok",
                    loaded.paths.config_file.display()
                ),
            }
            Ok(())
        }
        ConfigCommand::Schema => {
            out!("{}", config::schema_json());
            Ok(())
        }
        ConfigCommand::Get { path, json, config } => {
            let loaded = config::load(config.as_deref(), &ProcessEnv)?;
            let secrets = loaded.config.secrets();
            let mut value = serde_json::to_value(&loaded.config)
                .map_err(|e| Failure::other(format!("cannot show the config: {e}")))?;
            mask(&mut value, &secrets);
            let found = lookup(&value, &path)?;
            match found {
                serde_json::Value::String(text) if !json => outln!("{text}"),
                other => outln!(
                    "{}",
                    serde_json::to_string_pretty(other).unwrap_or_default()
                ),
            }
            Ok(())
        }
    }
}

/// Replaces every string that is (or contains) a secret with `****`.
fn mask(value: &mut serde_json::Value, secrets: &[String]) {
    match value {
        serde_json::Value::String(text)
            if secrets
                .iter()
                .any(|secret| !secret.is_empty() && text.contains(secret.as_str())) =>
        {
            *text = "****".to_owned();
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| mask(v, secrets)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| mask(v, secrets)),
        _ => {}
    }
}

/// The value at a dotted path, or a usage error naming the keys there are.
fn lookup<'a>(value: &'a serde_json::Value, path: &str) -> Result<&'a serde_json::Value, Failure> {
    let mut current = value;
    let mut walked = String::new();
    for key in path.split('.').filter(|k| !k.is_empty()) {
        let next = match current {
            serde_json::Value::Object(map) => map.get(key).ok_or_else(|| {
                let keys: Vec<&str> = map.keys().map(String::as_str).collect();
                Failure::usage(format!(
                    "config get: no key '{key}' {}, expected one of: {}",
                    if walked.is_empty() {
                        "at the top".to_owned()
                    } else {
                        format!("under '{walked}'")
                    },
                    if keys.is_empty() {
                        "(none set)".to_owned()
                    } else {
                        keys.join(", ")
                    }
                ))
            })?,
            serde_json::Value::Array(items) => {
                let index: usize = key.parse().map_err(|_| {
                    Failure::usage(format!(
                        "config get: '{walked}' is a list; expected an item number, not '{key}'"
                    ))
                })?;
                items.get(index).ok_or_else(|| {
                    Failure::usage(format!(
                        "config get: '{walked}' has {} item{}; there is no item {index} (items count from 0)",
                        items.len(),
                        if items.len() == 1 { "" } else { "s" }
                    ))
                })?
            }
            _ => {
                return Err(Failure::usage(format!(
                    "config get: '{walked}' is a single value; it has no '{key}'"
                )));
            }
        };
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(key);
        current = next;
    }
    Ok(current)
}
