//! Where each value of a loaded configuration came from: a line of the
//! config file (or of its profile overlay), an environment variable, or
//! the built-in default (`flynn config get --origin`).

use std::fmt;
use std::path::PathBuf;

use serde_json::Value;

use crate::document::{Document, KeyPath};
use crate::edit::{PathError, lookup, masked};
use crate::load::{Loaded, Source};

/// Where one value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Written at this line of this file (the config file or the profile
    /// overlay), `${VAR}`s included.
    File { path: PathBuf, line: u64 },
    /// Filled in from these environment variables.
    Env { variables: Vec<String> },
    /// Neither: the built-in default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Env { variables } => write!(f, "environment: {}", variables.join(", ")),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// One value of the configuration, secrets masked, and its origin.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueOrigin {
    /// Dotted path, list items by number (`models.tiers.default`).
    pub path: String,
    pub value: Value,
    pub origin: Origin,
}

/// Every value at or under the dotted `path` of the loaded configuration
/// (empty: all of it), one per scalar or list, with where it came from.
///
/// Reads the config file and its overlay again to find lines; a file
/// that cannot be read any more counts as holding nothing.
pub fn origins(loaded: &Loaded, path: &str) -> Result<Vec<ValueOrigin>, PathError> {
    let whole = masked(&loaded.config);
    let start = lookup(&whole, path)?;
    let mut texts: Vec<(PathBuf, String)> = Vec::new();
    // The overlay first: where both set a value, the overlay's wins.
    if let Some(overlay) = &loaded.overlay
        && let Ok(text) = std::fs::read_to_string(&overlay.file)
    {
        texts.push((overlay.file.clone(), text));
    }
    if let Source::File(file) = &loaded.source
        && let Ok(text) = std::fs::read_to_string(file)
    {
        texts.push((file.clone(), text));
    }
    let documents: Vec<(&PathBuf, Document<'_>)> = texts
        .iter()
        .filter_map(|(file, text)| Document::parse(text).ok().map(|doc| (file, doc)))
        .collect();

    let mut key_path = KeyPath::root();
    let mut dotted = Vec::new();
    let mut walk = &whole;
    for key in path.split('.').filter(|k| !k.is_empty()) {
        key_path = match walk {
            Value::Array(_) => key_path.index(key.parse().unwrap_or_default()),
            _ => key_path.key(key),
        };
        walk = match walk {
            Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
            Value::Object(map) => map.get(key),
            _ => None,
        }
        .unwrap_or(&Value::Null);
        dotted.push(key.to_owned());
    }

    let mut out = Vec::new();
    let mut leaves = Vec::new();
    collect(start, key_path, dotted, &mut leaves);
    for (key_path, dotted, value) in leaves {
        let joined = dotted.join(".");
        let origin = origin_of(loaded, &documents, &key_path, &joined);
        out.push(ValueOrigin {
            path: joined,
            value: value.clone(),
            origin,
        });
    }
    Ok(out)
}

/// The scalars and lists at or under `value`.
fn collect<'v>(
    value: &'v Value,
    key_path: KeyPath,
    dotted: Vec<String>,
    out: &mut Vec<(KeyPath, Vec<String>, &'v Value)>,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let mut next = dotted.clone();
                next.push(key.clone());
                collect(child, key_path.key(key), next, out);
            }
        }
        _ => out.push((key_path, dotted, value)),
    }
}

fn origin_of(
    loaded: &Loaded,
    documents: &[(&PathBuf, Document<'_>)],
    key_path: &KeyPath,
    dotted: &str,
) -> Origin {
    // The environment's values are recorded by path; a list item belongs
    // to its list.
    if let Some(filled) = loaded.from_env.iter().rev().find(|f| {
        dotted == f.path
            || dotted
                .strip_prefix(f.path.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|rest| rest.parse::<usize>().is_ok())
    }) {
        return Origin::Env {
            variables: filled.variables.clone(),
        };
    }
    for (file, doc) in documents {
        if let Some(node) = doc.find(key_path) {
            return Origin::File {
                path: (*file).clone(),
                line: node.line,
            };
        }
    }
    Origin::Default
}
