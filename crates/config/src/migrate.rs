//! Versioned migrations of the config file's `version:`.
//!
//! Each schema change that would make an older file invalid comes with a
//! [`Migration`] from the version before it: a list of edits made to the
//! file's text in place, so comments, order and formatting survive. After
//! the edits, every value the old file held must still be in the new one
//! (at its new path when a step renamed it); a migration that would drop a
//! block is refused before anything is written. [`migrate_file`] keeps a
//! copy of the old file next to it first.
//!
//! A file without `version:` is version 1, the first schema.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flynn_protocol::config::CONFIG_VERSION;
use serde_json::Value;

use crate::document::{Document, Key, Node, NodeKind};
use crate::edit::{offset_of_line, set_in_text, write_atomically};
use crate::env::Env;
use crate::error::{Error, Result};

/// The version of a file that does not say.
pub const UNVERSIONED: u32 = 1;

/// One edit on the way from one version to the next.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "version 1 is the first schema: no migration uses a step yet"
    )
)]
pub(crate) enum Step {
    /// Renames the key at the dotted `path` to `to` (same parent), in
    /// place: its value, comments and position stay.
    Rename {
        path: &'static str,
        to: &'static str,
    },
    /// Sets the dotted `path` to `value` (JSON) when the file lacks it.
    SetIfAbsent {
        path: &'static str,
        value: &'static str,
    },
}

/// The edits from version `from` to `from + 1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub from: u32,
    /// What changed, for people: shown by `flynn config migrate`.
    pub summary: &'static str,
    pub steps: &'static [Step],
}

/// Every migration, oldest first: `MIGRATIONS[i].from == i + 1`, and the
/// last one ends at `CONFIG_VERSION`. Version 1 is the first schema, so
/// there is none yet; each future schema change adds one here and a file
/// of the old version to `tests/fixtures/config-v<N>.yaml`.
pub(crate) const MIGRATIONS: &[Migration] = &[];

/// A migrated text and what was done to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Migrated {
    pub from: u32,
    pub to: u32,
    pub text: String,
    /// One line per change, for people.
    pub changes: Vec<String>,
}

/// What [`migrate_file`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub from: u32,
    pub to: u32,
    pub changes: Vec<String>,
    /// The copy of the file as it was, when the file was changed.
    pub backup: Option<PathBuf>,
}

/// The `version:` a text declares ([`UNVERSIONED`] when it has none).
pub fn version_of(text: &str) -> Result<u32> {
    let doc = Document::parse(text).map_err(|located| {
        Error::Migrate(format!(
            "the file is not valid YAML (line {}, column {}): {}",
            located.line, located.column, located.problem
        ))
    })?;
    Ok(declared_version(&doc)?.unwrap_or(UNVERSIONED))
}

fn declared_version(doc: &Document<'_>) -> Result<Option<u32>> {
    let NodeKind::Map(entries) = &doc.root.kind else {
        return Ok(None);
    };
    let Some((_, node)) = entries.iter().rev().find(|(key, _)| key.text == "version") else {
        return Ok(None);
    };
    match node.kind {
        NodeKind::Int(found) => u32::try_from(found)
            .ok()
            .filter(|v| *v >= 1)
            .map(Some)
            .ok_or_else(|| {
                Error::Migrate(format!(
                    "version {found} does not exist, expected 1 to {CONFIG_VERSION}"
                ))
            }),
        _ => Err(Error::Migrate(format!(
            "`version` is not a whole number (line {}), expected 1 to {CONFIG_VERSION}",
            node.line
        ))),
    }
}

/// Migrates a config text to this Flynn's version.
pub fn migrate_text(text: &str) -> Result<Migrated> {
    migrate_with(text, MIGRATIONS, CONFIG_VERSION)
}

/// Migrates `file` to this Flynn's version: a backup first
/// (`<file>.v<N>.bak`), then the new text, validated as a config (with
/// `env` for `${VAR}`s) and written atomically. With `dry_run` nothing is
/// written. A file already at the version is left alone.
pub fn migrate_file(file: &Path, env: &dyn Env, dry_run: bool) -> Result<Report> {
    let text = std::fs::read_to_string(file).map_err(|source| Error::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let migrated = migrate_text(&text)?;
    let mut report = Report {
        from: migrated.from,
        to: migrated.to,
        changes: migrated.changes,
        backup: None,
    };
    if migrated.text == text {
        return Ok(report);
    }
    crate::parse_str(&migrated.text, file, env)?;
    if dry_run {
        return Ok(report);
    }
    let backup = backup_path(file, migrated.from);
    std::fs::copy(file, &backup).map_err(|source| Error::Write {
        path: backup.clone(),
        source,
    })?;
    write_atomically(file, &migrated.text).map_err(|source| Error::Write {
        path: file.to_path_buf(),
        source,
    })?;
    report.backup = Some(backup);
    Ok(report)
}

/// `config.yaml.v1.bak`, or with a number when that exists already.
fn backup_path(file: &Path, version: u32) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.yaml".to_owned());
    let first = file.with_file_name(format!("{name}.v{version}.bak"));
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|n| file.with_file_name(format!("{name}.v{version}.{n}.bak")))
        .find(|candidate| !candidate.exists())
        .unwrap_or(first)
}

pub(crate) fn migrate_with(text: &str, migrations: &[Migration], target: u32) -> Result<Migrated> {
    let doc = Document::parse(text).map_err(|located| {
        Error::Migrate(format!(
            "the file is not valid YAML (line {}, column {}): {}",
            located.line, located.column, located.problem
        ))
    })?;
    let declared = declared_version(&doc)?;
    let from = declared.unwrap_or(UNVERSIONED);
    if from > target {
        return Err(Error::Migrate(format!(
            "the file is version {from}, newer than this Flynn's {target}; upgrade Flynn instead"
        )));
    }
    let mut renames: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut changes = Vec::new();
    let mut out = text.to_owned();
    for version in from..target {
        let migration = migrations
            .iter()
            .find(|m| m.from == version)
            .ok_or_else(|| {
                Error::Migrate(format!(
                    "no migration from version {version} to {} (this is a bug in Flynn)",
                    version + 1
                ))
            })?;
        changes.push(format!(
            "version {} → {}: {}",
            version,
            version + 1,
            migration.summary
        ));
        for step in migration.steps {
            match *step {
                Step::Rename { path, to } => {
                    out = rename(&out, path, to)?;
                    let old: Vec<String> = path.split('.').map(str::to_owned).collect();
                    let mut new = old.clone();
                    if let Some(last) = new.last_mut() {
                        *last = to.to_owned();
                    }
                    changes.push(format!("  renamed {path} to {}", new.join(".")));
                    renames.push((old, new));
                }
                Step::SetIfAbsent { path, value } => {
                    let doc = parse_own(&out)?;
                    if find(&doc.root, &split(path)).is_none() {
                        let value: Value = serde_json::from_str(value).map_err(|e| {
                            Error::Migrate(format!("the value for {path} is not JSON: {e}"))
                        })?;
                        out = set_in_text(&out, &[(path.to_owned(), value.clone())])
                            .map_err(|e| Error::Migrate(e.0))?;
                        changes.push(format!("  set {path} to {value}"));
                    }
                }
            }
        }
    }
    if declared != Some(target) {
        out = set_version(&out, declared.is_some(), target)?;
        if declared.is_none() && from == target {
            changes.push(format!("wrote version: {target} (the file had none)"));
        }
    }

    check_kept(&doc.root, &out, &renames)?;
    Ok(Migrated {
        from,
        to: target,
        text: out,
        changes,
    })
}

/// Fails unless every value of `old` is in `new_text`, at its path after
/// the renames.
fn check_kept(old: &Node, new_text: &str, renames: &[(Vec<String>, Vec<String>)]) -> Result<()> {
    let after = leaves(&parse_own(new_text)?.root);
    let missing: Vec<String> = leaves(old)
        .into_iter()
        .map(|path| renamed(path, renames))
        .filter(|path| path.first().is_none_or(|k| k != "version") && !after.contains(path))
        .map(|path| path.join("."))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Migrate(format!(
            "the migration would drop {} (this is a bug in Flynn; the file was not changed)",
            missing.join(", ")
        )))
    }
}

fn parse_own(text: &str) -> Result<Document<'_>> {
    Document::parse(text).map_err(|located| {
        Error::Migrate(format!(
            "the migrated text does not parse (line {}): {} (this is a bug in Flynn; the file was not changed)",
            located.line, located.problem
        ))
    })
}

fn split(path: &str) -> Vec<&str> {
    path.split('.').filter(|k| !k.is_empty()).collect()
}

/// The key and value at `path` (keys only).
fn find<'n>(root: &'n Node, path: &[&str]) -> Option<(&'n Key, &'n Node)> {
    let (last, parents) = path.split_last()?;
    let mut node = root;
    for key in parents {
        let NodeKind::Map(entries) = &node.kind else {
            return None;
        };
        node = &entries.iter().rev().find(|(k, _)| k.text == *key)?.1;
    }
    let NodeKind::Map(entries) = &node.kind else {
        return None;
    };
    entries
        .iter()
        .rev()
        .find(|(k, _)| k.text == *last)
        .map(|(k, v)| (k, v))
}

/// Renames the key at `path` to `to`, editing only the key's text.
pub(crate) fn rename(text: &str, path: &str, to: &str) -> Result<String> {
    let doc = parse_own(text)?;
    let keys = split(path);
    let Some((key, _)) = find(&doc.root, &keys) else {
        return Ok(text.to_owned());
    };
    let mut sibling = keys.clone();
    if let Some(last) = sibling.last_mut() {
        *last = to;
    }
    if find(&doc.root, &sibling).is_some() {
        return Err(Error::Migrate(format!(
            "both {path} and {} are set; keep one and run `flynn config migrate` again",
            sibling.join(".")
        )));
    }
    let line = offset_of_line(text, key.line);
    let column = usize::try_from(key.column.saturating_sub(1)).unwrap_or(0);
    let start = text[line..]
        .char_indices()
        .nth(column)
        .map_or(text.len(), |(i, _)| line + i);
    let rest = &text[start..];
    let (skip, quote) = match rest.chars().next() {
        Some(q @ ('"' | '\'')) => (1, Some(q)),
        _ => (0, None),
    };
    let name = &rest[skip..];
    if !name.starts_with(key.text.as_str()) {
        return Err(Error::Migrate(format!(
            "cannot find the key {path} on line {} to rename it; rename it to {to} by hand",
            key.line
        )));
    }
    let after = &name[key.text.len()..];
    let ends_cleanly = match quote {
        Some(q) => after.starts_with(q),
        None => after.starts_with(':') || after.starts_with(' '),
    };
    if !ends_cleanly {
        return Err(Error::Migrate(format!(
            "cannot rename the key {path} on line {} in place; rename it to {to} by hand",
            key.line
        )));
    }
    let from = start + skip;
    Ok(format!(
        "{}{to}{}",
        &text[..from],
        &text[from + key.text.len()..]
    ))
}

/// Writes `version: N`: in place, or as the first key (after the
/// comments that open the file).
fn set_version(text: &str, present: bool, version: u32) -> Result<String> {
    if present {
        return set_in_text(text, &[("version".to_owned(), Value::from(version))])
            .map_err(|e| Error::Migrate(e.0));
    }
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("---") {
            offset += line.len();
        } else {
            break;
        }
    }
    let doc = parse_own(text)?;
    if !matches!(doc.root.kind, NodeKind::Map(_) | NodeKind::Null)
        || text[offset..].starts_with('{')
    {
        return set_in_text(text, &[("version".to_owned(), Value::from(version))])
            .map_err(|e| Error::Migrate(e.0));
    }
    Ok(format!(
        "{}version: {version}\n{}",
        &text[..offset],
        &text[offset..]
    ))
}

/// Every value's key path: scalars, lists (whole) and empty mappings.
fn leaves(root: &Node) -> BTreeSet<Vec<String>> {
    fn walk(node: &Node, path: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        match &node.kind {
            NodeKind::Map(entries) if !entries.is_empty() => {
                for (key, value) in entries {
                    path.push(key.text.clone());
                    walk(value, path, out);
                    path.pop();
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, &mut Vec::new(), &mut out);
    out
}

/// `path` after the renames, in order.
fn renamed(mut path: Vec<String>, renames: &[(Vec<String>, Vec<String>)]) -> Vec<String> {
    for (old, new) in renames {
        if path.starts_with(old) {
            path.splice(..old.len(), new.iter().cloned());
        }
    }
    path
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A made-up history of three versions, to exercise the engine the
    /// way real schema changes will.
    const CHAIN: &[Migration] = &[
        Migration {
            from: 1,
            summary: "gateway.bind is now gateway.listen",
            steps: &[Step::Rename {
                path: "gateway.bind",
                to: "listen",
            }],
        },
        Migration {
            from: 2,
            summary: "tools.shell is now tools.exec; sessions get a retention",
            steps: &[
                Step::Rename {
                    path: "tools.shell",
                    to: "exec",
                },
                Step::SetIfAbsent {
                    path: "sessions.retention_days",
                    value: "90",
                },
            ],
        },
    ];

    const V1: &str = "\
# My Flynn config.
# Keep this comment.

providers:
  local: { kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }  # the box under the desk
gateway:
  # where the daemon listens
  bind: 127.0.0.1:18800   # loopback only
  token: ${FLYNN_TOKEN}
tools:
  shell:
    timeout_secs: 30
    # allowed commands
    allow: [ls, git]
";

    #[test]
    fn an_unversioned_file_goes_through_every_step_with_comments_and_order_kept() {
        let migrated = migrate_with(V1, CHAIN, 3).unwrap();
        assert_eq!((migrated.from, migrated.to), (1, 3));
        assert_eq!(
            migrated.text,
            "\
# My Flynn config.
# Keep this comment.

version: 3
providers:
  local: { kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }  # the box under the desk
gateway:
  # where the daemon listens
  listen: 127.0.0.1:18800   # loopback only
  token: ${FLYNN_TOKEN}
tools:
  exec:
    timeout_secs: 30
    # allowed commands
    allow: [ls, git]
sessions:
  retention_days: 90
"
        );
        assert_eq!(
            migrated.changes,
            [
                "version 1 → 2: gateway.bind is now gateway.listen",
                "  renamed gateway.bind to gateway.listen",
                "version 2 → 3: tools.shell is now tools.exec; sessions get a retention",
                "  renamed tools.shell to tools.exec",
                "  set sessions.retention_days to 90",
            ]
        );
    }

    #[test]
    fn every_older_version_reaches_the_newest_and_the_newest_is_left_alone() {
        let v2 = migrate_with(V1, CHAIN, 2).unwrap();
        assert!(v2.text.contains("version: 2\n"), "{}", v2.text);
        let from_v2 = migrate_with(&v2.text, CHAIN, 3).unwrap();
        assert_eq!(from_v2.from, 2);
        assert_eq!(from_v2.text, migrate_with(V1, CHAIN, 3).unwrap().text);
        let again = migrate_with(&from_v2.text, CHAIN, 3).unwrap();
        assert_eq!(
            (again.text.as_str(), again.changes.len()),
            (from_v2.text.as_str(), 0)
        );
        // A version in place is updated in place.
        let explicit = format!("version: 1  # pinned\n{V1}");
        let migrated = migrate_with(&explicit, CHAIN, 3).unwrap();
        assert!(
            migrated.text.starts_with("version: 3  # pinned\n"),
            "{}",
            migrated.text
        );
    }

    #[test]
    fn newer_missing_and_conflicting_versions_are_refused() {
        let newer = migrate_with("version: 4\n", CHAIN, 3).unwrap_err();
        assert_eq!(
            newer.to_string(),
            "cannot migrate the config: the file is version 4, newer than this Flynn's 3; upgrade Flynn instead"
        );
        let gap = migrate_with("version: 1\n", &CHAIN[1..], 3).unwrap_err();
        assert!(
            gap.to_string().contains("no migration from version 1 to 2"),
            "{gap}"
        );
        let both = migrate_with("gateway:\n  bind: a\n  listen: b\n", CHAIN, 2).unwrap_err();
        assert!(
            both.to_string()
                .contains("both gateway.bind and gateway.listen are set"),
            "{both}"
        );
        let zero = migrate_with("version: 0\n", CHAIN, 3).unwrap_err();
        assert!(
            zero.to_string().contains("version 0 does not exist"),
            "{zero}"
        );
    }

    #[test]
    fn a_result_that_lost_a_value_is_refused() {
        let old = Document::parse(V1).unwrap();
        let renames = [(
            vec!["tools".to_owned(), "shell".to_owned()],
            vec!["tools".to_owned(), "exec".to_owned()],
        )];
        let renamed_text = rename(V1, "tools.shell", "exec").unwrap();
        check_kept(&old.root, &renamed_text, &renames).unwrap();
        // The same text without the rename recorded, and a text missing a
        // block: both lose values.
        let error = check_kept(&old.root, &renamed_text, &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot migrate the config: the migration would drop tools.shell.allow, tools.shell.timeout_secs (this is a bug in Flynn; the file was not changed)"
        );
        let without_gateway = V1.replace("gateway:\n", "other:\n");
        let error = check_kept(&old.root, &without_gateway, &[]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("drop gateway.bind, gateway.token"),
            "{error}"
        );
    }

    #[test]
    fn quoted_keys_are_renamed_inside_their_quotes() {
        let text = "gateway:\n  \"bind\": x\n";
        assert_eq!(
            rename(text, "gateway.bind", "listen").unwrap(),
            "gateway:\n  \"listen\": x\n"
        );
    }

    #[test]
    fn the_table_covers_every_version_up_to_this_one() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.from as usize, index + 1);
        }
        assert_eq!(MIGRATIONS.len() as u32 + 1, CONFIG_VERSION);
    }
}
