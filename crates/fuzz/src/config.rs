//! The config file: decoding, `${VAR}` expansion, and the in-place edits
//! of `flynn config set` and `flynn config migrate`.

use std::collections::BTreeMap;
use std::path::Path;

use flynn_config::edit::{parse_cli_value, set_in_text, unexpanded};
use flynn_config::{Error, MapEnv, fuzzing};
use serde_json::Value;

use crate::{fields, skip_known, text};

fn env() -> MapEnv {
    MapEnv::new()
        .with("HOME", "/nonexistent/fuzz-home")
        .with("FLYNN_HOME", "/nonexistent/fuzz-home/.flynn")
        .with("A", "alpha")
        .with("EMPTY", "")
        .with("KEY", "sk-test-${A}$")
}

/// Whether a position is inside the text (or just past its end). Lines
/// are counted as YAML counts them: a lone CR breaks a line too (found by
/// fuzzing: a file with CRs got diagnostics past its last LF line).
fn within(text: &str, line: u64) -> bool {
    let breaks = text.replace("\r\n", "\n").matches(['\n', '\r']).count();
    line <= breaks as u64 + 1
}

/// A config file's text: parsed as YAML, decoded, validated. Problems
/// carry a line inside the text.
pub fn config_parse(data: &[u8]) {
    let text = text(data);
    if let Err((line, _)) = fuzzing::document(&text) {
        assert!(within(&text, line), "line {line} is past the text");
    }
    match flynn_config::parse_str(&text, Path::new("fuzz.yaml"), &env()) {
        Ok(_) => {}
        Err(Error::Invalid { diagnostics }) => {
            assert!(
                !diagnostics.is_empty(),
                "an invalid config without a diagnostic"
            );
            for diagnostic in diagnostics {
                assert!(
                    within(&text, diagnostic.line),
                    "{diagnostic} is past the text"
                );
            }
        }
        Err(_) => {}
    }
}

/// `${VAR}` expansion: a value without `$` is kept as it is.
pub fn config_expand(data: &[u8]) {
    let text = text(data);
    let expanded = fuzzing::expand(&text, &env());
    if !text.contains('$') {
        assert_eq!(expanded.as_deref(), Ok(text.as_str()));
    }
}

/// Every leaf of a document (scalars and lists) by its key path. Keys
/// holding a `.` are left out: a dotted path cannot name them.
fn leaves(value: &Value, path: &mut Vec<String>, out: &mut BTreeMap<Vec<String>, Value>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if key.contains('.') {
                    continue;
                }
                path.push(key.clone());
                leaves(child, path, out);
                path.pop();
            }
        }
        other => {
            out.insert(path.clone(), other.clone());
        }
    }
}

fn leaves_of(value: &Value) -> BTreeMap<Vec<String>, Value> {
    let mut out = BTreeMap::new();
    leaves(value, &mut Vec::new(), &mut out);
    out
}

fn related(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Inputs that hit the known panic of editing next to a scalar ending in
/// a multi-byte character.
fn known_edit_panic(text: &str) -> bool {
    skip_known() && !text.is_ascii()
}

/// `flynn config set`: `path NUL value NUL text`. The edited text
/// re-parses, holds the value at the path, and keeps every other value.
pub fn config_edit(data: &[u8]) {
    let [path, value, text] = fields(data, 3)[..] else {
        return;
    };
    let (path, value, text) = (
        crate::text(path),
        parse_cli_value(&crate::text(value)),
        crate::text(text),
    );
    if known_edit_panic(&text) {
        return;
    }
    let Ok(edited) = set_in_text(&text, &[(path.clone(), value.clone())]) else {
        return;
    };
    let Ok(before) = unexpanded(&text) else {
        return;
    };
    let after = unexpanded(&edited)
        .unwrap_or_else(|e| panic!("the edited text does not parse: {e}\n---\n{edited}"));
    let keys: Vec<String> = path
        .split('.')
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    let after_leaves = leaves_of(&after);
    for (key, old) in leaves_of(&before) {
        if related(&key, &keys) {
            continue;
        }
        assert_eq!(
            after_leaves.get(&key),
            Some(&old),
            "{key:?} changed\n---\n{edited}"
        );
    }
}

/// A migration's rename: `path NUL new name NUL text`. The result
/// re-parses and holds every value, the renamed one under its new name.
pub fn config_migrate(data: &[u8]) {
    let [path, to, text] = fields(data, 3)[..] else {
        return;
    };
    let path = crate::text(path);
    // Migrations rename to names written in the code: a plain key.
    let to: String = crate::text(to)
        .chars()
        .filter(|c| c.is_ascii_lowercase() || *c == '_')
        .collect();
    let text = crate::text(text);
    if to.is_empty() || known_edit_panic(&text) {
        return;
    }
    let Ok(renamed) = fuzzing::rename(&text, &path, &to) else {
        return;
    };
    let Ok(before) = unexpanded(&text) else {
        return;
    };
    let after = unexpanded(&renamed)
        .unwrap_or_else(|e| panic!("the renamed text does not parse: {e}\n---\n{renamed}"));
    let keys: Vec<String> = path
        .split('.')
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    let mut new_keys = keys.clone();
    if let Some(last) = new_keys.last_mut() {
        last.clone_from(&to);
    }
    let after_leaves = leaves_of(&after);
    for (key, old) in leaves_of(&before) {
        let key = if !keys.is_empty() && key.starts_with(&keys) {
            let mut moved = new_keys.clone();
            moved.extend_from_slice(&key[keys.len()..]);
            moved
        } else {
            key
        };
        assert_eq!(
            after_leaves.get(&key),
            Some(&old),
            "{key:?} was lost\n---\n{renamed}"
        );
    }
}
