//! A skill's declared permissions as the executor checks them.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use wildmatch::WildMatch;

use crate::manifest::DeclaredPermissions;

/// What one skill may do, ready to check calls against. Built by
/// [`crate::Skill::permissions`]; the executor checks each call the model
/// makes while it uses the skill and refuses the rest.
#[derive(Debug, Clone)]
pub struct Permissions {
    skill: String,
    tools: Vec<String>,
    /// Where it may read: `paths`, `fs.read` and `fs.write`.
    reads: Vec<String>,
    /// Where it may write: `paths` and `fs.write`.
    writes: Vec<String>,
    network: bool,
    /// `net`: host globs reachable without `network`.
    hosts: Vec<String>,
    home: Option<PathBuf>,
}

/// A call outside a skill's declared permissions. Its message names the
/// skill, what was asked and what the manifest allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("skill '{skill}' may not {asked}: {allowed}")]
pub struct Refusal {
    pub skill: String,
    pub asked: Asked,
    /// What the manifest allows instead, as a sentence.
    pub allowed: String,
}

/// What a refused call asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Tool(String),
    Path(PathBuf),
    Network,
    Host(String),
}

impl fmt::Display for Asked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Asked::Tool(tool) => write!(f, "call the tool '{tool}'"),
            Asked::Path(path) => write!(f, "use the path '{}'", path.display()),
            Asked::Network => f.write_str("use the network"),
            Asked::Host(host) => write!(f, "reach the host '{host}'"),
        }
    }
}

impl Permissions {
    /// The permissions `declared` by the skill `skill`; `home` is what `~`
    /// means in its paths (a `~` path allows nothing without it).
    pub fn new(skill: &str, declared: &DeclaredPermissions, home: Option<&Path>) -> Permissions {
        Permissions {
            skill: skill.to_owned(),
            tools: declared.tools.clone(),
            reads: declared
                .paths
                .iter()
                .chain(&declared.fs.read)
                .chain(&declared.fs.write)
                .cloned()
                .collect(),
            writes: declared
                .paths
                .iter()
                .chain(&declared.fs.write)
                .cloned()
                .collect(),
            network: declared.network,
            hosts: declared.net.clone(),
            home: home.map(Path::to_path_buf),
        }
    }

    /// The skill these permissions belong to.
    pub fn skill(&self) -> &str {
        &self.skill
    }

    /// Allows `tool` when one of the declared globs matches its name.
    pub fn check_tool(&self, tool: &str) -> Result<(), Refusal> {
        if self
            .tools
            .iter()
            .any(|glob| WildMatch::new(glob).matches(tool))
        {
            return Ok(());
        }
        Err(self.refuse(Asked::Tool(tool.to_owned()), "tools", &self.tools))
    }

    /// Allows `path` (relative to `workspace`, absolute, or under `~`) when
    /// it is one of the declared paths or under one: for a call that
    /// writes, `paths` and `fs.write`; else those and `fs.read`. `..` is
    /// resolved first, and so are symbolic links of the part that exists,
    /// so neither leads out of an allowed directory.
    pub fn check_path(&self, path: &Path, workspace: &Path, writes: bool) -> Result<(), Refusal> {
        let workspace = absolute(workspace);
        let declared = if writes { &self.writes } else { &self.reads };
        if let Some(asked) = self.resolve(path, &workspace) {
            let allowed = declared
                .iter()
                .filter_map(|p| self.resolve(Path::new(p), &workspace));
            for root in allowed {
                if asked.starts_with(&root) {
                    return Ok(());
                }
            }
        }
        let kind = if writes { "paths to write" } else { "paths" };
        Err(self.refuse(Asked::Path(path.to_path_buf()), kind, declared))
    }

    /// Allows network use when the manifest declares `"network": true`.
    pub fn check_network(&self) -> Result<(), Refusal> {
        if self.network {
            return Ok(());
        }
        Err(Refusal {
            skill: self.skill.clone(),
            asked: Asked::Network,
            allowed: "its manifest does not declare network access (\"network\": true)".into(),
        })
    }

    /// Allows a call to `host` (from the URL it names) when the manifest
    /// declares `"network": true`, or a `net` glob matches the host.
    pub fn check_host(&self, host: &str) -> Result<(), Refusal> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if self.network
            || self
                .hosts
                .iter()
                .any(|glob| WildMatch::new(&glob.to_ascii_lowercase()).matches(&host))
        {
            return Ok(());
        }
        Err(self.refuse(Asked::Host(host), "hosts", &self.hosts))
    }

    fn refuse(&self, asked: Asked, kind: &str, declared: &[String]) -> Refusal {
        let allowed = if declared.is_empty() {
            format!("its manifest allows no {kind}")
        } else {
            let list: Vec<String> = declared.iter().map(|d| format!("'{d}'")).collect();
            format!("its manifest allows only the {kind} {}", list.join(", "))
        };
        Refusal {
            skill: self.skill.clone(),
            asked,
            allowed,
        }
    }

    /// Where `path` leads: `~` expanded, joined to the workspace when
    /// relative, `..` removed, links of its existing part followed.
    fn resolve(&self, path: &Path, workspace: &Path) -> Option<PathBuf> {
        let mut components = path.components();
        let joined = match components.next() {
            Some(Component::Normal(first)) if first == "~" => {
                self.home.as_deref()?.join(components.as_path())
            }
            _ if path.is_absolute() => path.to_path_buf(),
            _ => workspace.join(path),
        };
        Some(follow_links(&normalize(&joined)))
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Removes `.` and `..` without touching the file system; `..` at the root
/// stays at the root.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Canonicalises the longest part of `path` that exists and appends the
/// rest.
fn follow_links(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permissions(tools: &[&str], paths: &[&str], network: bool) -> Permissions {
        let declared = DeclaredPermissions {
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            paths: paths.iter().map(|s| (*s).to_owned()).collect(),
            network,
            ..DeclaredPermissions::default()
        };
        Permissions::new("demo", &declared, Some(Path::new("/home/ann")))
    }

    #[test]
    fn lexical_paths_stay_inside_the_declared_ones() {
        let p = permissions(&[], &[".", "~/notes", "/srv/data"], false);
        let ws = Path::new("/nonexistent-ws");
        for ok in [
            "src/main.rs",
            ".",
            "/nonexistent-ws/a",
            "~/notes/todo.md",
            "/srv/data/x/../y",
        ] {
            assert_eq!(p.check_path(Path::new(ok), ws, false), Ok(()), "{ok}");
        }
        for refused in [
            "../other",
            "/etc/passwd",
            "~/.ssh/id_ed25519",
            "/srv/data/../secret",
            "src/../../x",
        ] {
            assert!(
                p.check_path(Path::new(refused), ws, false).is_err(),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_home_path_allows_nothing_without_a_home() {
        let declared = DeclaredPermissions {
            paths: vec!["~/notes".into()],
            ..DeclaredPermissions::default()
        };
        let p = Permissions::new("demo", &declared, None);
        assert!(
            p.check_path(Path::new("~/notes/a"), Path::new("/ws"), false)
                .is_err()
        );
    }
}
