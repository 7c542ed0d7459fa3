//! Keeps file tools inside the workspace. A path argument resolves against
//! the workspace; one that ends up outside it (absolute, `..`, or through
//! a symlink) is refused.
//!
//! What is guaranteed: the path checked is the canonical one (symlinks
//! resolved) of the file, or of its nearest existing ancestor for a file
//! that does not exist yet. What is not: a symlink swapped in between the
//! check and the use (a race against another process writing the
//! workspace at the same moment); the OS sandbox, not this check, is the
//! boundary for commands.

use std::path::{Component, Path, PathBuf};

use crate::{ToolContext, ToolError};

impl ToolContext {
    /// `path` (relative to the workspace, or absolute inside it) as an
    /// absolute path inside the workspace, or an error the model can act
    /// on.
    /// Paths under [`ToolContext::hidden`] (FLYNN_HOME) are refused even
    /// when the workspace holds them.
    pub fn confine(&self, path: &str) -> Result<PathBuf, ToolError> {
        let resolved = confine(&self.workspace, path)?;
        refuse_hidden(&self.private_dirs(), path, &resolved)?;
        Ok(resolved)
    }

    /// Whether `path` (canonical, as [`confine`](Self::confine) returns
    /// them) is hidden from tools.
    pub fn is_hidden(&self, path: &Path) -> bool {
        self.private_dirs().iter().any(|dir| path.starts_with(dir))
    }

    /// The hidden directories, canonical: what walks skip. One that holds
    /// the workspace (the default `FLYNN_HOME/workspace`) is left out: the
    /// workspace is the tools' own, and the rest of that directory is
    /// outside it anyway.
    pub fn private_dirs(&self) -> Vec<PathBuf> {
        let workspace = self
            .workspace
            .canonicalize()
            .unwrap_or_else(|_| self.workspace.clone());
        self.hidden
            .iter()
            .map(|dir| dir.canonicalize().unwrap_or_else(|_| dir.clone()))
            .filter(|dir| !workspace.starts_with(dir))
            .collect()
    }
}

/// Refuses `resolved` when it lies in one of the `hidden` directories
/// (canonical).
fn refuse_hidden(hidden: &[PathBuf], path: &str, resolved: &Path) -> Result<(), ToolError> {
    for dir in hidden {
        if resolved.starts_with(dir) {
            return Err(ToolError::failed(format!(
                "{path} is inside {}, where Flynn keeps its own data (keys, conversations); tools may not touch it",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// See [`ToolContext::confine`].
pub fn confine(workspace: &Path, path: &str) -> Result<PathBuf, ToolError> {
    if path.trim().is_empty() {
        return Err(ToolError::failed(
            "the path is empty; give a file path relative to the workspace",
        ));
    }
    let root = workspace.canonicalize().map_err(|e| {
        ToolError::failed(format!(
            "the workspace {} cannot be used: {e}",
            workspace.display()
        ))
    })?;
    let requested = Path::new(path);
    let joined = if requested.is_absolute() {
        requested.to_path_buf()
    } else {
        root.join(requested)
    };
    let lexical = normalize(&joined);
    let outside = || {
        ToolError::failed(format!(
            "{path} is outside the workspace {}; file tools only work inside it (use a path relative to it)",
            root.display()
        ))
    };
    // Catches `..` and absolute paths before touching the disk, and
    // absolute paths that name the workspace through another spelling.
    let lexical = match lexical {
        Some(p) if p.starts_with(&root) => p,
        Some(p) if p.starts_with(workspace) => root.join(p.strip_prefix(workspace).unwrap_or(&p)),
        _ => return Err(outside()),
    };
    // Then symlinks: the real place of the file, or of its nearest
    // existing ancestor, must be inside too.
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    let real = loop {
        match existing.canonicalize() {
            Ok(real) => break real,
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return Err(outside()),
            },
        }
    };
    if !real.starts_with(&root) {
        return Err(ToolError::failed(format!(
            "{path} leads outside the workspace {} through a symbolic link (to {}); file tools only work inside it",
            root.display(),
            real.display()
        )));
    }
    let mut resolved = real;
    for name in rest.into_iter().rev() {
        resolved.push(name);
    }
    Ok(resolved)
}

/// `path` with `.` removed and `..` applied; `None` if `..` climbs past
/// the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// `path` relative to the workspace, for messages and listings.
pub(crate) fn display(workspace: &Path, path: &Path) -> String {
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    match path.strip_prefix(&root) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
        Ok(relative) => relative.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_resolve_and_escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        let root = ws.canonicalize().unwrap();
        assert_eq!(confine(&ws, "src/a.rs").unwrap(), root.join("src/a.rs"));
        assert_eq!(confine(&ws, "./src/../b.txt").unwrap(), root.join("b.txt"));
        assert_eq!(
            confine(&ws, root.join("new/dir/c.txt").to_str().unwrap()).unwrap(),
            root.join("new/dir/c.txt")
        );
        for escape in ["../x", "src/../../x", "/etc/passwd", ""] {
            assert!(confine(&ws, escape).is_err(), "{escape}");
        }
        let error = confine(&ws, "../secret").unwrap_err().to_string();
        assert!(
            error.starts_with("../secret is outside the workspace"),
            "{error}"
        );
    }

    #[test]
    fn flynn_home_inside_the_workspace_is_out_of_reach() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("me");
        let home = ws.join(".local/share/flynn");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("gateway.token"), "t").unwrap();
        let mut ctx = ToolContext::new(&ws);
        ctx.hidden = vec![home.clone()].into();
        for path in [
            ".local/share/flynn/gateway.token",
            ".local/share/flynn",
            "./.local/share/flynn/new.md",
            home.join("sessions.db").to_str().unwrap(),
        ] {
            let error = ctx.confine(path).unwrap_err().to_string();
            assert_eq!(
                error,
                format!(
                    "{path} is inside {}, where Flynn keeps its own data (keys, conversations); tools may not touch it",
                    home.canonicalize().unwrap().display()
                )
            );
        }
        assert!(ctx.confine(".local/share/other.txt").is_ok());
        assert!(ctx.is_hidden(&home.canonicalize().unwrap().join("memory")));
        assert!(!ctx.is_hidden(&ws.canonicalize().unwrap().join("notes.md")));
    }

    /// The default workspace, `FLYNN_HOME/workspace`: open to the file
    /// tools, the rest of FLYNN_HOME not.
    #[test]
    fn a_workspace_inside_flynn_home_is_open_and_the_rest_of_it_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("flynn");
        let ws = home.join("workspace");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(home.join("sessions.db"), "s").unwrap();
        let mut ctx = ToolContext::new(&ws);
        ctx.hidden = vec![home.clone()].into();
        assert!(ctx.confine("notes.md").is_ok());
        assert!(ctx.confine("sub/new.md").is_ok());
        assert!(!ctx.is_hidden(&ws.canonicalize().unwrap().join("notes.md")));
        for path in ["../sessions.db", home.join("sessions.db").to_str().unwrap()] {
            let error = ctx.confine(path).unwrap_err().to_string();
            assert!(error.contains("is outside the workspace"), "{error}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), ws.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("dir")).unwrap();
        std::os::unix::fs::symlink("inner.txt", ws.join("ok")).unwrap();
        for escape in ["link", "dir/secret", "dir/new-file"] {
            let error = confine(&ws, escape).unwrap_err().to_string();
            assert!(
                error.contains("through a symbolic link"),
                "{escape}: {error}"
            );
        }
        std::fs::write(ws.join("inner.txt"), "i").unwrap();
        assert!(confine(&ws, "ok").is_ok());
    }
}
