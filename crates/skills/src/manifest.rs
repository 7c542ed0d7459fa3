//! `manifest.json`: what a skill needs to run and what it may do.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The longest description the index shows, in characters.
pub const MAX_DESCRIPTION: usize = 200;
/// The longest skill name, in characters.
pub const MAX_NAME: usize = 64;

/// A skill's `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Lowercase letters, digits and `-`; the name of the skill's directory.
    pub name: String,
    /// One line of at most [`MAX_DESCRIPTION`] characters, shown in the
    /// prompt's index.
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub requires: Requirements,
    #[serde(default)]
    pub permissions: DeclaredPermissions,
    /// A setup step a person must confirm before it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<InstallStep>,
}

/// What must be true of the machine for the skill to be available.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Requirements {
    /// The systems it runs on; empty means any.
    pub os: Vec<Os>,
    /// Programs that must be on `PATH`.
    pub bins: Vec<String>,
    /// Environment variables that must be set (and not empty).
    pub env: Vec<String>,
}

/// An operating system a skill may require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Os {
    Linux,
    Macos,
    Windows,
}

impl Os {
    /// The name `std::env::consts::OS` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Os::Linux => "linux",
            Os::Macos => "macos",
            Os::Windows => "windows",
        }
    }
}

impl fmt::Display for Os {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the skill declares it may do; the executor refuses the rest (see
/// [`crate::Permissions`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeclaredPermissions {
    /// Globs of tool names (`shell.exec`, `web.*`); `*` and `?` only.
    pub tools: Vec<String>,
    /// Paths it may touch: relative to the workspace (`.` is the
    /// workspace), absolute, or under `~`. A path allows what is under it.
    pub paths: Vec<String>,
    /// Paths by what may be done there (the design notes' `fs.read` and
    /// `fs.write`), beside `paths` (which allows both).
    pub fs: FsPermissions,
    /// Whether it may use the network.
    pub network: bool,
    /// Hosts it may reach (`api.github.com`, `*.example.com`) when
    /// `network` is off: calls that name a URL (`web.fetch`,
    /// `browser.open`) to one of them. Commands and MCP tools, which name
    /// no host Flynn can check, still need `network`.
    pub net: Vec<String>,
}

/// `permissions.fs`: paths to read, and paths to write (which may be read
/// too).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FsPermissions {
    pub read: Vec<String>,
    pub write: Vec<String>,
}

/// A setup step (say, installing a program). Only modelled here: whoever
/// runs it asks a person first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallStep {
    /// The program and its arguments; no shell.
    pub command: Vec<String>,
    /// What it does, shown to the person asked to confirm it.
    pub description: String,
}

impl Manifest {
    /// Parses and validates `text`, the content of the file `path` (named
    /// in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Manifest> {
        let json_error = |field: String, inner: serde_json::Error| {
            let (line, column) = (inner.line(), inner.column());
            let message = inner.to_string();
            let suffix = format!(" at line {line} column {column}");
            let problem = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
            Error::Manifest {
                path: path.to_path_buf(),
                line: (line > 0).then_some(line),
                column: (line > 0).then_some(column),
                field: (field != ".").then_some(field),
                problem,
            }
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let manifest: Manifest = serde_path_to_error::deserialize(&mut de).map_err(|err| {
            let field = err.path().to_string();
            json_error(field, err.into_inner())
        })?;
        de.end().map_err(|e| json_error(".".into(), e))?;
        manifest.validate(path)?;
        Ok(manifest)
    }

    /// Checks the rules serde cannot express.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: String, problem: String| Err(Error::manifest(path, field, problem));
        if let Some(problem) = name_problem(&self.name) {
            return bad("name".into(), problem);
        }
        let description = self.description.trim();
        if description.is_empty() {
            return bad(
                "description".into(),
                "is empty; expected one line saying what the skill does".into(),
            );
        }
        if self.description.contains(['\n', '\r']) {
            return bad(
                "description".into(),
                "has more than one line; expected a single line".into(),
            );
        }
        let chars = self.description.chars().count();
        if chars > MAX_DESCRIPTION {
            return bad(
                "description".into(),
                format!("is {chars} characters long; expected at most {MAX_DESCRIPTION}"),
            );
        }
        if self.version.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return bad(
                "version".into(),
                "is empty; expected a version such as \"1.0.0\", or no field".into(),
            );
        }
        for (i, bin) in self.requires.bins.iter().enumerate() {
            if bin.is_empty() || bin.contains(['/', '\\']) || bin.chars().any(char::is_whitespace) {
                return bad(
                    format!("requires.bins[{i}]"),
                    format!(
                        "'{bin}' is not a program name; expected a name looked up on PATH, such as \"git\""
                    ),
                );
            }
        }
        for (i, var) in self.requires.env.iter().enumerate() {
            if !is_env_name(var) {
                return bad(
                    format!("requires.env[{i}]"),
                    format!(
                        "'{var}' is not an environment variable name; expected letters, digits and '_', such as \"GITHUB_TOKEN\""
                    ),
                );
            }
        }
        for (i, tool) in self.permissions.tools.iter().enumerate() {
            if tool.is_empty() || tool.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad(
                    format!("permissions.tools[{i}]"),
                    format!(
                        "'{tool}' is not a tool name or glob; expected something like \"shell.exec\" or \"web.*\""
                    ),
                );
            }
        }
        for (i, p) in self.permissions.paths.iter().enumerate() {
            if p.trim().is_empty() || p.contains('\0') {
                return bad(
                    format!("permissions.paths[{i}]"),
                    "is empty; expected a path relative to the workspace (\".\" for all of it), absolute, or under ~".into(),
                );
            }
        }
        if let Some(install) = &self.install {
            if install
                .command
                .first()
                .is_none_or(|program| program.trim().is_empty())
            {
                return bad(
                    "install.command".into(),
                    "is empty; expected the program and its arguments, such as [\"brew\", \"install\", \"gh\"]".into(),
                );
            }
            if install.description.trim().is_empty() {
                return bad(
                    "install.description".into(),
                    "is empty; expected what the step does, for the person asked to confirm it"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

/// Why `name` is not a valid skill name, if it is not.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    let expected = "expected lowercase letters, digits and '-', such as \"web-search\"";
    if name.is_empty() {
        Some(format!("is empty; {expected}"))
    } else if name.chars().count() > MAX_NAME {
        Some(format!("'{name}' is longer than {MAX_NAME} characters"))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        Some(format!("'{name}' is not a valid skill name; {expected}"))
    } else if name.starts_with('-') || name.ends_with('-') {
        Some(format!("'{name}' starts or ends with '-'; {expected}"))
    } else {
        None
    }
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest> {
        Manifest::parse(text, Path::new("skills/x/manifest.json"))
    }

    fn message(text: &str) -> String {
        match parse(text) {
            Ok(m) => panic!("parsed: {m:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_full_manifest_parses() {
        let m = parse(
            r#"{"name": "gh", "description": "GitHub from the command line.", "version": "0.2",
                "requires": {"os": ["linux", "macos"], "bins": ["gh"], "env": ["GITHUB_TOKEN"]},
                "permissions": {"tools": ["shell.exec", "web.*"], "paths": [".", "~/notes"], "network": true},
                "install": {"command": ["brew", "install", "gh"], "description": "Installs the gh CLI."}}"#,
        )
        .unwrap();
        assert_eq!(m.requires.os, vec![Os::Linux, Os::Macos]);
        assert_eq!(m.permissions.tools, vec!["shell.exec", "web.*"]);
        assert!(m.permissions.network);
        assert_eq!(m.install.unwrap().command, vec!["brew", "install", "gh"]);
    }

    #[test]
    fn errors_name_the_file_the_field_and_what_was_expected() {
        assert_eq!(
            message(r#"{"name": "x", "description": "d", "permissions": {"network": "yes"}}"#),
            "skills/x/manifest.json:1:66: permissions.network: invalid type: string \"yes\", expected a boolean"
        );
        assert_eq!(
            message(
                "{\"name\": \"x\",\n \"description\": \"d\", \"requires\": {\"os\": [\"beos\"]}}"
            ),
            "skills/x/manifest.json:2:47: requires.os[0]: unknown variant `beos`, expected one of `linux`, `macos`, `windows`"
        );
        assert_eq!(
            message(r#"{"name": "x", "description": "d", "tools": []}"#),
            "skills/x/manifest.json:1:41: tools: unknown field `tools`, expected one of `name`, `description`, `version`, `requires`, `permissions`, `install`"
        );
        assert_eq!(
            message(r#"{"description": "d"}"#),
            "skills/x/manifest.json:1:20: missing field `name`"
        );
        assert_eq!(
            message(r#"{"name": "Web_Search", "description": "d"}"#),
            "skills/x/manifest.json: name: 'Web_Search' is not a valid skill name; expected lowercase letters, digits and '-', such as \"web-search\""
        );
        assert_eq!(
            message(r#"{"name": "x", "description": "two\nlines"}"#),
            "skills/x/manifest.json: description: has more than one line; expected a single line"
        );
        let long = "d".repeat(201);
        assert_eq!(
            message(&format!(r#"{{"name": "x", "description": "{long}"}}"#)),
            "skills/x/manifest.json: description: is 201 characters long; expected at most 200"
        );
        assert_eq!(
            message(r#"{"name": "x", "description": "d", "requires": {"env": ["GITHUB TOKEN"]}}"#),
            "skills/x/manifest.json: requires.env[0]: 'GITHUB TOKEN' is not an environment variable name; expected letters, digits and '_', such as \"GITHUB_TOKEN\""
        );
        assert_eq!(
            message(
                r#"{"name": "x", "description": "d", "install": {"command": [], "description": "d"}}"#
            ),
            "skills/x/manifest.json: install.command: is empty; expected the program and its arguments, such as [\"brew\", \"install\", \"gh\"]"
        );
        assert_eq!(
            message(r#"{"name": "x", "description": "d"} x"#),
            "skills/x/manifest.json:1:35: trailing characters"
        );
    }
}
