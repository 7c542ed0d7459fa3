//! Changing a config file by dotted path, keeping its comments and layout
//! (`flynn config set`, the gateway's `config.patch`).
//!
//! Each change is made to the text: a scalar is replaced where it stands;
//! a missing key is added under its parent, at the parent's indentation;
//! a block (a map or a list) is replaced by one line in flow style. The
//! result is validated like any config before it is written (atomically,
//! temp file then rename), so an invalid change leaves the file as it was.

use std::path::Path;

use serde_json::Value;

use crate::document::{Document, Node, NodeKind};
use crate::{Env, Error, Result};

/// The config as JSON with every secret (`FlynnConfig::secrets`) shown as
/// `****`.
pub fn masked(config: &flynn_protocol::config::FlynnConfig) -> Value {
    let secrets = config.secrets();
    let mut value = serde_json::to_value(config).unwrap_or(Value::Null);
    mask(&mut value, &secrets);
    value
}

fn mask(value: &mut Value, secrets: &[String]) {
    match value {
        Value::String(text)
            if secrets
                .iter()
                .any(|secret| !secret.is_empty() && text.contains(secret.as_str())) =>
        {
            *text = "****".to_owned();
        }
        Value::Array(items) => items.iter_mut().for_each(|v| mask(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| mask(v, secrets)),
        _ => {}
    }
}

/// The file's text as JSON, as written: `${VAR}`s not expanded, no
/// defaults filled in (for rewriting a list without baking secrets in).
pub fn unexpanded(text: &str) -> std::result::Result<Value, PathError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| PathError(e.to_string()))
}

/// Why a path leads nowhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathError(pub String);

/// The value at a dotted path (`models.tiers.default.0`); empty: all.
pub fn lookup<'a>(value: &'a Value, path: &str) -> std::result::Result<&'a Value, PathError> {
    let mut current = value;
    let mut walked = String::new();
    for key in path.split('.').filter(|k| !k.is_empty()) {
        let next = match current {
            Value::Object(map) => map.get(key).ok_or_else(|| {
                let keys: Vec<&str> = map.keys().map(String::as_str).collect();
                PathError(format!(
                    "no key '{key}' {}, expected one of: {}",
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
            Value::Array(items) => {
                let index: usize = key.parse().map_err(|_| {
                    PathError(format!(
                        "'{walked}' is a list; expected an item number, not '{key}'"
                    ))
                })?;
                items.get(index).ok_or_else(|| {
                    PathError(format!(
                        "'{walked}' has {} item{}; there is no item {index} (items count from 0)",
                        items.len(),
                        if items.len() == 1 { "" } else { "s" }
                    ))
                })?
            }
            _ => {
                return Err(PathError(format!(
                    "'{walked}' is a single value; it has no '{key}'"
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

/// Reads a value given on a command line: JSON when it parses as JSON
/// (`42`, `true`, `["a", "b"]`, `{"k": 1}`, `"quoted"`), else the text
/// as a string.
pub fn parse_cli_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// Sets each `(dotted path, value)` in `text`, returning the new text.
/// Fails on a path that crosses a single value or a list item that does
/// not exist, and on a document it cannot edit in place (flow style).
pub fn set_in_text(
    text: &str,
    changes: &[(String, Value)],
) -> std::result::Result<String, PathError> {
    let mut text = text.to_owned();
    for (path, value) in changes {
        let keys: Vec<&str> = path.split('.').filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            return Err(PathError(
                "an empty path: name the key to set, like `models.tiers.default`".to_owned(),
            ));
        }
        if let Some(bad) = keys.iter().find(|k| !is_plain_key(k)) {
            return Err(PathError(format!(
                "'{}' in the path '{}' cannot be written as a key: expected letters, digits, '_', '-' or '/'",
                bad.escape_debug(),
                path.escape_debug()
            )));
        }
        let edited = set_one(&text, &keys, value)?;
        // The edits place text by the layout around them; a layout they
        // do not foresee must not leave a file that no longer loads.
        if let Err(e) = Document::parse(&edited) {
            return Err(PathError(format!(
                "setting '{path}' here would leave the file unreadable ({}:{}: {}): the YAML around it is laid out in a way this edit cannot extend; set it by editing the file",
                e.line, e.column, e.problem
            )));
        }
        text = edited;
    }
    Ok(text)
}

/// Whether a path segment can be written as a YAML key as it is: no
/// line break, comment, quote or indicator can slip into the file.
fn is_plain_key(key: &str) -> bool {
    key.chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '/'))
}

/// Applies the changes to the file, validates the result as a config
/// (with `env` for `${VAR}`s) and writes it atomically. The file is left
/// untouched when anything fails.
///
/// The read, edit and write hold an exclusive lock on the file's
/// directory, so two writers at once (two `config.patch` calls, or the
/// CLI's `config set` beside the daemon) take turns and neither loses the
/// other's change.
pub fn set_in_file(file: &Path, changes: &[(String, Value)], env: &dyn Env) -> Result<()> {
    let _lock = lock_dir(file).map_err(|source| Error::Write {
        path: file.to_path_buf(),
        source,
    })?;
    let text = std::fs::read_to_string(file).map_err(|source| Error::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let edited = set_in_text(&text, changes).map_err(|e| Error::Edit(e.0))?;
    crate::parse_str(&edited, file, env)?;
    write_atomically(file, &edited).map_err(|source| Error::Write {
        path: file.to_path_buf(),
        source,
    })
}

/// Writes `text` to `file` through a temporary file in the same
/// directory, keeping the file's permissions (0600 for a new file: a
/// config may hold keys).
///
/// The temporary file is created exclusively and without following a
/// symbolic link, with the final mode from the start (set exactly through
/// the open file, whatever the umask), so neither a link planted at its
/// name nor a moment of wider permissions exposes the text.
pub fn write_atomically(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = dir_of(file);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.yaml".to_owned());
    let permissions = std::fs::metadata(file).ok().map(|m| m.permissions());
    let (temp, mut out) = create_temp(dir, &name, permissions.as_ref())?;
    let written = out.write_all(text.as_bytes()).and_then(|()| out.sync_all());
    drop(out);
    if let Err(e) = written.and_then(|()| std::fs::rename(&temp, file)) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    // The rename is durable only once the directory is: without this a
    // power cut can bring back the old file, or none on some file systems.
    sync_dir(dir)
}

fn dir_of(file: &Path) -> &Path {
    file.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// An exclusive advisory lock on `file`'s directory, held until the
/// returned handle is dropped. The directory, not the file: a rename
/// replaces the file's inode, and a lock on the old one guards nothing.
#[cfg(unix)]
fn lock_dir(file: &Path) -> std::io::Result<std::fs::File> {
    let dir = std::fs::File::open(dir_of(file))?;
    rustix::fs::flock(&dir, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(dir)
}

#[cfg(not(unix))]
fn lock_dir(_file: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Creates `.<name>.<pid>.<n>.tmp` in `dir` exclusively, never through a
/// symbolic link, with `permissions` (else 0600) set on the open file.
fn create_temp(
    dir: &Path,
    name: &str,
    permissions: Option<&std::fs::Permissions>,
) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mode = permissions.map_or(0o600, |p| p.mode() & 0o7777);
        options
            .mode(mode & 0o777)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        mode
    };
    let mut tries = 0;
    loop {
        let temp = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match options.open(&temp) {
            Ok(out) => {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    if let Err(e) = out.set_permissions(std::fs::Permissions::from_mode(mode)) {
                        drop(out);
                        let _ = std::fs::remove_file(&temp);
                        return Err(e);
                    }
                }
                #[cfg(not(unix))]
                if let Some(permissions) = permissions {
                    out.set_permissions(permissions.clone())?;
                }
                return Ok((temp, out));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// A value as YAML text on one line: scalars plain or double-quoted,
/// maps and lists in flow style (JSON is valid YAML flow).
fn inline(value: &Value) -> String {
    let json = match value {
        Value::String(text) => serde_json::to_string(text).unwrap_or_default(),
        other => other.to_string(),
    };
    // JSON escapes the C0 controls but writes DEL, the C1 controls and a
    // few more as they are, and YAML refuses those in a document even
    // quoted (NEL and the Unicode line separators read as line breaks to
    // YAML 1.1 readers). They can only be inside strings here, where
    // `\uXXXX` means the same to both.
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if yaml_printable(c) {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{:04X}", u32::from(c)));
        }
    }
    out
}

/// Whether YAML takes `c` as it is inside a double-quoted scalar.
fn yaml_printable(c: char) -> bool {
    matches!(c,
        ' '..='~'
        | '\u{A0}'..='\u{2027}'
        | '\u{202A}'..='\u{D7FF}'
        | '\u{E000}'..='\u{FEFE}'
        | '\u{FF00}'..='\u{FFFD}'
        | '\u{10000}'..)
}

// Both search bytes, not `str`s: an offset from a span may fall inside a
// multi-byte character (the last byte of `café`), and slicing a `str`
// there panics. A newline is one byte in UTF-8, so the offsets they
// return are always character boundaries.
fn line_start(text: &str, offset: usize) -> usize {
    let bytes = text.as_bytes();
    bytes[..offset.min(bytes.len())]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)
}

fn line_end(text: &str, offset: usize) -> usize {
    let bytes = text.as_bytes();
    let from = offset.min(bytes.len());
    bytes[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |i| from + i + 1)
}

/// Byte offset of the start of 1-based `line`.
pub(crate) fn offset_of_line(text: &str, line: u64) -> usize {
    if line <= 1 {
        return 0;
    }
    let mut seen = 1;
    for (i, byte) in text.bytes().enumerate() {
        if byte == b'\n' {
            seen += 1;
            if seen == line {
                return i + 1;
            }
        }
    }
    text.len()
}

/// The indent of a map whose first key is `key`: that key's column, or
/// the column of the tags, anchors and explicit-key indicator written
/// before it (`!tag key:`, `&anchor key:` and `? key` start the map at the
/// `!`, `&` or `?`).
fn entry_indent(text: &str, key: &crate::document::Key) -> usize {
    let column = usize::try_from(key.column).unwrap_or(1).saturating_sub(1);
    let start = offset_of_line(text, key.line).min(text.len());
    let line = &text[start..line_end(text, start)];
    let before: String = line.chars().take(column).collect();
    let mut prefix = before.as_str();
    let mut indent = column;
    loop {
        let trimmed = prefix.trim_end_matches([' ', '\t']);
        let token_start = trimmed.rfind([' ', '\t']).map_or(0, |i| i + 1);
        let token = &trimmed[token_start..];
        if !(token.starts_with('!') || token.starts_with('&') || token == "?") {
            if trimmed.is_empty()
                && let Some(column) = indicator_alone_above(&text[..start])
            {
                return column;
            }
            return indent;
        }
        prefix = &trimmed[..token_start];
        indent = prefix.chars().count();
    }
}

/// The column of an explicit-key indicator written alone on the last line
/// with content in `above` (`?`, with any tags and anchors, its key on a
/// later line), which starts the map there.
fn indicator_alone_above(above: &str) -> Option<usize> {
    let line = above
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))?;
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let alone = tokens.contains(&"?")
        && tokens
            .iter()
            .all(|t| *t == "?" || t.starts_with('!') || t.starts_with('&'));
    alone.then(|| line.chars().take_while(|c| *c == ' ' || *c == '\t').count())
}

/// Lines for `keys` (the missing part of a path) set to `value`, in block
/// style, starting at `indent`.
fn block_lines(keys: &[&str], value: &Value, indent: usize) -> String {
    let mut out = String::new();
    for (depth, key) in keys.iter().enumerate() {
        let pad = " ".repeat(indent + depth * 2);
        if depth + 1 == keys.len() {
            out.push_str(&format!("{pad}{key}: {}\n", inline(value)));
        } else {
            out.push_str(&format!("{pad}{key}:\n"));
        }
    }
    out
}

/// The last byte of the text a node covers, through its whole last line.
/// A block map's or list's span covers its first entry only: its end is
/// that of its last entry.
fn node_end(text: &str, node: &Node) -> Option<usize> {
    // An empty node (the null value of `key:` or `? key`) covers no text:
    // the parser places it where the next token starts, which may be the
    // next entry's line, even one of a map further out.
    let own = node
        .span
        .clone()
        .filter(|span| span.end > span.start)
        .map(|span| line_end(text, span.end.min(text.len()).saturating_sub(1)));
    let last_entry = match &node.kind {
        NodeKind::Map(entries) => entries.last().map(|(key, value)| {
            let key_end = line_end(text, offset_of_line(text, key.line));
            key_end.max(node_end(text, value).unwrap_or(0))
        }),
        NodeKind::Seq(items) => items.last().and_then(|item| node_end(text, item)),
        _ => None,
    };
    own.max(last_entry)
}

fn set_one(text: &str, keys: &[&str], value: &Value) -> std::result::Result<String, PathError> {
    let doc = Document::parse(text).map_err(|e| {
        PathError(format!(
            "the file is not valid YAML ({}:{}): {}",
            e.line, e.column, e.problem
        ))
    })?;
    let mut node = &doc.root;
    let mut walked: Vec<&str> = Vec::new();
    // Column of the key whose value `node` is (1 for the root).
    let mut key_column: u64 = 1;
    for (depth, key) in keys.iter().enumerate() {
        match &node.kind {
            NodeKind::Map(entries) => {
                let found = entries.iter().rev().find(|(k, _)| k.text == *key);
                match found {
                    Some((found_key, child)) => {
                        walked.push(key);
                        key_column = found_key.column;
                        node = child;
                        if depth + 1 == keys.len() {
                            return replace(text, &doc, entries, key, node, value);
                        }
                    }
                    None => return add_under(text, node, depth == 0, &keys[depth..], value),
                }
            }
            NodeKind::Null if depth == 0 => {
                // An empty file, or one whose root is written as a null
                // (`~`, `null`): that word goes, so the keys below it are
                // the root.
                let mut out = text.to_owned();
                if let Some(span) = node.span.clone()
                    && let Some(word) = text.get(span.clone())
                    && matches!(word, "~" | "null" | "Null" | "NULL")
                {
                    out.replace_range(span, "");
                }
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&block_lines(keys, value, 0));
                return Ok(out);
            }
            NodeKind::Null => {
                // `key:` with nothing under it: the new keys go below it.
                let at = node_end(text, node)
                    .unwrap_or_else(|| line_end(text, offset_of_line(text, node.line)));
                let parent_indent = usize::try_from(key_column).unwrap_or(1).saturating_sub(1);
                let mut out = text.to_owned();
                let insert = block_lines(&keys[depth..], value, parent_indent + 2);
                let at = at.min(out.len());
                let prefix = if at > 0 && !out[..at].ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                out.insert_str(at, &format!("{prefix}{insert}"));
                return Ok(out);
            }
            NodeKind::Seq(items) => {
                let index: usize = key.parse().map_err(|_| {
                    PathError(format!(
                        "'{}' is a list; expected an item number, not '{key}'",
                        walked.join(".")
                    ))
                })?;
                let child = items.get(index).ok_or_else(|| {
                    PathError(format!(
                        "'{}' has {} items; there is no item {index} (items count from 0)",
                        walked.join("."),
                        items.len()
                    ))
                })?;
                walked.push(key);
                node = child;
                if depth + 1 == keys.len() {
                    return replace_item(text, node, value);
                }
            }
            _ => {
                return Err(PathError(format!(
                    "'{}' is a single value; it has no '{key}'",
                    walked.join(".")
                )));
            }
        }
    }
    Err(PathError("nothing to set".to_owned()))
}

/// Replaces the value of `key` (an entry of `entries`).
fn replace(
    text: &str,
    _doc: &Document<'_>,
    entries: &[(crate::document::Key, Node)],
    key: &str,
    node: &Node,
    value: &Value,
) -> std::result::Result<String, PathError> {
    let Some((key_node, _)) = entries.iter().rev().find(|(k, _)| k.text == key) else {
        return Err(PathError(format!("no key '{key}'")));
    };
    let scalar_old = !matches!(
        node.kind,
        NodeKind::Map(_) | NodeKind::Seq(_) | NodeKind::Null
    );
    let mut out = text.to_owned();
    if scalar_old
        && let Some(span) = node.span.clone()
        && span.end <= text.len()
        && !text[span.clone()].contains('\n')
    {
        out.replace_range(span, &inline(value));
        return Ok(out);
    }
    // A block, or nothing: the key's line(s) become one line.
    let start = offset_of_line(text, key_node.line);
    let end = match node_end(text, node) {
        Some(end) if end > start => end,
        _ => line_end(text, start),
    };
    let indent = usize::try_from(key_node.column)
        .unwrap_or(1)
        .saturating_sub(1);
    // Keep a trailing comment on the key's own line when the block is on it.
    out.replace_range(
        start..end.min(out.len()),
        &format!("{}{key}: {}\n", " ".repeat(indent), inline(value)),
    );
    Ok(out)
}

fn replace_item(text: &str, node: &Node, value: &Value) -> std::result::Result<String, PathError> {
    match node.span.clone() {
        Some(span)
            if span.end <= text.len()
                && !text[span.clone()].contains('\n')
                && !matches!(node.kind, NodeKind::Map(_) | NodeKind::Seq(_)) =>
        {
            let mut out = text.to_owned();
            out.replace_range(span, &inline(value));
            Ok(out)
        }
        _ => Err(PathError(
            "only a single value in a list can be replaced in place; set the whole list instead"
                .to_owned(),
        )),
    }
}

/// Adds `keys` = `value` under the map `parent`, after its last entry.
fn add_under(
    text: &str,
    parent: &Node,
    top: bool,
    keys: &[&str],
    value: &Value,
) -> std::result::Result<String, PathError> {
    let NodeKind::Map(entries) = &parent.kind else {
        return Err(PathError("expected a map".to_owned()));
    };
    let Some((first_key, _)) = entries.first() else {
        return Err(PathError("cannot add to an empty map".to_owned()));
    };
    // At the top too: a file may indent its top-level keys.
    let indent = entry_indent(text, first_key);
    let first_line_start = offset_of_line(text, first_key.line);
    if text[first_line_start..].trim_start().starts_with('{') {
        return Err(PathError(
            "the parent map is written in flow style ({...}); edit it by hand".to_owned(),
        ));
    }
    let mut at = 0;
    for (key, node) in entries {
        let key_end = line_end(text, offset_of_line(text, key.line));
        at = at.max(key_end).max(node_end(text, node).unwrap_or(0));
    }
    let at = if top { text.len() } else { at.min(text.len()) };
    let mut out = text.to_owned();
    let prefix = if at > 0 && !out[..at].ends_with('\n') {
        "\n"
    } else {
        ""
    };
    out.insert_str(at, &format!("{prefix}{}", block_lines(keys, value, indent)));
    let _ = line_start;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(text: &str, path: &str, value: Value) -> String {
        set_in_text(text, &[(path.to_owned(), value)]).unwrap_or_else(|e| panic!("{e}"))
    }

    const FILE: &str = "# my flynn\nproviders:\n  local:   # the box under the desk\n    kind: ollama\n    base_url: http://127.0.0.1:11434/v1\nmodels:\n  tiers:\n    default: [local/qwen2.5]  # fast enough\n    fast:\n      - local/qwen2.5\n# the end\n";

    #[test]
    fn a_scalar_is_replaced_in_place() {
        let out = set(
            FILE,
            "providers.local.base_url",
            json!("http://10.0.0.2:11434/v1"),
        );
        assert!(
            out.contains("    base_url: \"http://10.0.0.2:11434/v1\"\n"),
            "{out}"
        );
        assert!(out.contains("# the box under the desk") && out.contains("# the end"));
        assert_eq!(out.lines().count(), FILE.lines().count());
    }

    #[test]
    fn a_missing_key_is_added_under_its_parent() {
        let out = set(FILE, "providers.local.timeout_secs", json!(30));
        assert!(
            out.contains("    base_url: http://127.0.0.1:11434/v1\n    timeout_secs: 30\nmodels:"),
            "{out}"
        );
        let out = set(FILE, "gateway.bind", json!("0.0.0.0:18800"));
        assert!(
            out.ends_with("# the end\ngateway:\n  bind: \"0.0.0.0:18800\"\n"),
            "{out}"
        );
    }

    #[test]
    fn a_key_goes_after_an_entry_with_an_empty_value_not_after_the_next_line() {
        // Found by the `config_edit` fuzz target: the null value of
        // `? inner` was placed by the parser at the start of the next line,
        // a key of the outer map, so `b` went in under that key.
        let text = "# !op\na:\n  ? inner\n~  b:OOOOOOOOd:  \n \n";
        let out = set(text, "a.b", json!(true));
        let after = unexpanded(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(after["a"]["b"], json!(true), "{out}");
        assert_eq!(after["a"]["inner"], Value::Null, "{out}");
        assert_eq!(after["~  b:OOOOOOOOd"], Value::Null, "{out}");
        let out = set("a:\n  empty:\nz: 1\n", "a.b", json!(2));
        assert_eq!(out, "a:\n  empty:\n  b: 2\nz: 1\n");
    }

    #[test]
    fn a_key_yaml_cannot_hold_bare_is_refused() {
        // Found by the `config_edit` fuzz target: a path segment holding a
        // line break and a comment was written into the file as it was.
        let text = "agent:\n  other: 1\n";
        for path in [
            "agentx # trailing\n  .model",
            "a: b.c",
            "[x]",
            " agent.model",
        ] {
            let Err(error) = set_in_text(text, &[(path.to_owned(), json!("x"))]) else {
                panic!("{path:?} was accepted");
            };
            assert!(
                error.0.contains("expected letters"),
                "{path:?}: {}",
                error.0
            );
        }
        assert!(set_in_text(text, &[("agent.my-box_2".to_owned(), json!(1))]).is_ok());
    }

    #[test]
    fn a_key_goes_after_the_whole_of_a_nested_block_and_a_block_is_replaced_whole() {
        // Found by the `config_edit` fuzz target: a map's extent was that of
        // its first entry, so a key added beside a map of several entries
        // went in after its first entry (here `tiers:` into `tierc:`, taking
        // `fast` with it), and replacing such a map left its other entries
        // behind.
        let text = "models:\n  tierc:\n    default: x\n    fast: [a, b]\n    list:\n      - c\n      - d\nproviders: {}\n";
        let out = set(text, "models.tiers.fast", json!(["e"]));
        assert!(
            out.starts_with(text.trim_end_matches("providers: {}\n")),
            "{out}"
        );
        assert_eq!(
            unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
            json!({
                "models": {
                    "tierc": {"default": "x", "fast": ["a", "b"], "list": ["c", "d"]},
                    "tiers": {"fast": ["e"]},
                },
                "providers": {},
            })
        );
        let out = set(text, "models.tierc", json!("y"));
        assert_eq!(out, "models:\n  tierc: \"y\"\nproviders: {}\n");
        let out = set(FILE, "models.fallback", json!("z"));
        assert!(
            out.ends_with("      - local/qwen2.5\n  fallback: \"z\"\n# the end\n"),
            "{out}"
        );
    }

    #[test]
    fn a_key_is_added_at_the_column_of_a_tag_written_before_the_first_key() {
        // Found by the `config_edit` fuzz target: with `!tag key:` the map
        // starts at the tag; the new key went in at the first key's
        // column, right of the others, which is not YAML.
        let text = " !t a: 1\n b:\n   &x c: 2\n   d: 3\n";
        let out = set(text, "e", json!(4));
        assert_eq!(out, " !t a: 1\n b:\n   &x c: 2\n   d: 3\n e: 4\n");
        let out = set(text, "b.f", json!(5));
        assert_eq!(out, " !t a: 1\n b:\n   &x c: 2\n   d: 3\n   f: 5\n");
        assert_eq!(
            unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
            json!({"a": 1, "b": {"c": 2, "d": 3, "f": 5}})
        );
        // Found by the same target: a key added to a root written in flow
        // style went below it, which is not YAML; it is refused instead,
        // as it is under a flow map deeper down.
        let refused = set_in_text("{A}\n", &[("b".to_owned(), json!("c"))]);
        assert!(
            refused.as_ref().is_err_and(|e| e.0.contains("flow style")),
            "{refused:?}"
        );
        // Found by the same target: `?` alone on its line, the key on a
        // later one, starts the map at the `?` too.
        let out = set("# top\n\n?\n\n   0   -\n \n", "a.b", json!(true));
        assert_eq!(
            unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}"))["a"],
            json!({"b": true}),
            "{out}"
        );
        // An explicit key (`? key`) starts the map at the `?`.
        let out = set(
            "  ?   k
",
            "a.b",
            json!(true),
        );
        assert_eq!(
            out,
            "  ?   k
  a:
    b: true
"
        );
        assert_eq!(
            unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
            json!({"k": null, "a": {"b": true}})
        );
    }

    #[test]
    fn a_key_is_added_to_a_file_whose_root_is_written_as_null() {
        // Found by the `config_edit` fuzz target: `~` with a comment after
        // it is a null root; the key went below the `~`, which is not YAML.
        let out = set("# top:\n~ #note d: \"\n", "c", json!("ab.&true"));
        assert_eq!(out, "# top:\n #note d: \"\nc: \"ab.&true\"\n");
        for text in ["~\n", "null\n", "--- ~\n", "NULL # none yet"] {
            let out = set(text, "a.b", json!(1));
            assert_eq!(
                unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
                json!({"a": {"b": 1}}),
                "{text:?} became {out:?}"
            );
        }
        // A root null the edit cannot take apart is refused, not broken.
        let refused = set_in_text("!!null ~\n", &[("a".to_owned(), json!(1))]);
        assert!(
            refused.as_ref().is_err_and(|e| e.0.contains("unreadable")),
            "{refused:?}"
        );
    }

    #[test]
    fn an_edit_that_would_not_parse_is_refused_and_the_text_kept() {
        // Found by the `config_edit` fuzz target: an explicit key (`?`)
        // whose key is an empty tagged node on the next line; the new key
        // went in at the tag's column, which is not YAML.
        let text = "# top:\n?  # inner  X:\n !\n";
        match set_in_text(text, &[("a.b".to_owned(), json!("x"))]) {
            Ok(out) => assert!(Document::parse(&out).is_ok(), "{out}"),
            Err(e) => assert!(e.0.contains("unreadable"), "{e:?}"),
        }
    }

    #[test]
    fn a_top_level_key_is_added_at_the_indent_of_an_indented_root() {
        // Found by the `config_edit` fuzz target: a file whose top-level
        // keys are indented got the new key at column 1, which is not YAML.
        let out = set("\n  tiers:\n    default: x\n", "gateway.port", json!(707));
        assert_eq!(
            out,
            "\n  tiers:\n    default: x\n  gateway:\n    port: 707\n"
        );
        assert_eq!(
            unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
            json!({"tiers": {"default": "x"}, "gateway": {"port": 707}})
        );
    }

    #[test]
    fn keys_are_added_and_replaced_beside_values_ending_in_multibyte_characters() {
        let text = "agents:\n  main:\n    title: café\n    name: José 日本\n";
        let out = set(text, "agents.main.tier", json!("fast"));
        assert_eq!(
            out,
            "agents:\n  main:\n    title: café\n    name: José 日本\n    tier: \"fast\"\n"
        );
        let out = set(text, "agents.main.title", json!("thé"));
        assert!(
            out.starts_with("agents:\n  main:\n    title: \"thé\"\n    name: José 日本\n"),
            "{out}"
        );
        let out = set(
            "agents:\n  main:\n    tools: [café]\n  other: ü\n",
            "agents.main.tools",
            json!(["ä"]),
        );
        assert!(out.contains("tools: [\"ä\"]\n  other: ü\n"), "{out}");
    }

    #[test]
    fn values_with_characters_yaml_refuses_raw_are_escaped_and_read_back() {
        // Found by the `config_edit` fuzz target: DEL written raw inside
        // double quotes made the edited file invalid YAML.
        let value = "a\u{7f}b\u{85}c\u{9f}d\u{2028}e\u{feff}f\u{ffff}g é 日本";
        for path in ["agents.main.title", "gateway.note"] {
            let out = set(FILE, path, json!(value));
            assert!(!out.contains('\u{7f}'), "{out}");
            let read = unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
            assert_eq!(
                lookup(&read, path).unwrap_or_else(|e| panic!("{e}")),
                &json!(value),
                "{out}"
            );
        }
        let out = set(FILE, "models.tiers.fast", json!(["x\u{7f}y"]));
        let read = unexpanded(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(
            lookup(&read, "models.tiers.fast").unwrap_or_else(|e| panic!("{e}")),
            &json!(["x\u{7f}y"])
        );
    }

    #[test]
    fn a_list_is_replaced_by_one_line() {
        let out = set(FILE, "models.tiers.fast", json!(["local/a", "local/b"]));
        assert!(
            out.contains("    fast: [\"local/a\",\"local/b\"]\n# the end"),
            "{out}"
        );
        let out = set(FILE, "models.tiers.default", json!(["local/x"]));
        assert!(
            out.contains("    default: [\"local/x\"]\n    fast:"),
            "{out}"
        );
    }

    #[test]
    fn a_list_item_is_replaced_in_place() {
        let out = set(FILE, "models.tiers.fast.0", json!("local/z"));
        assert!(out.contains("      - \"local/z\"\n"), "{out}");
        let error = set_in_text(FILE, &[("models.tiers.fast.3".into(), json!("x"))]);
        assert!(error.is_err_and(|e| e.0.contains("no item 3")));
    }

    #[test]
    fn an_empty_file_gets_the_keys() {
        assert_eq!(
            set("", "gateway.bind", json!("a")),
            "gateway:\n  bind: \"a\"\n"
        );
        assert_eq!(
            set("gateway:\n", "gateway.bind", json!("a")),
            "gateway:\n  bind: \"a\"\n"
        );
    }

    #[test]
    fn a_path_through_a_value_is_refused() {
        let error = set_in_text(FILE, &[("providers.local.kind.x".into(), json!(1))]);
        assert!(error.is_err_and(|e| e.0.contains("single value")));
    }

    #[test]
    fn edits_are_valid_configs() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let env = crate::MapEnv::new();
        let out = set(FILE, "compaction.keep_turns", json!(6));
        let config = crate::parse_str(&out, Path::new("c.yaml"), &env)?;
        assert_eq!(config.compaction.keep_turns, 6);
        Ok(())
    }
}
