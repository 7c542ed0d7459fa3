//! Where tools work: the directory file tools are confined to and commands
//! run in. The daemon never uses the directory it was started from (a
//! systemd unit starts in `/`, a user unit in `$HOME`): without
//! `tools.workspace` it works in `FLYNN_HOME/workspace`, created private
//! (0700). The CLI's embedded runs keep the current directory, unless that
//! is `/`, the user's home or a directory holding `FLYNN_HOME`, which would
//! put the owner's keys and conversations in reach of every tool.

use std::path::{Path, PathBuf};

use crate::{Env, Error, Result};

/// How the workspace was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceOrigin {
    /// `tools.workspace` names it: used as it is, even `/` or `$HOME`.
    Configured,
    /// The current directory (the CLI's embedded runs).
    CurrentDir,
    /// `FLYNN_HOME/workspace`.
    Default,
}

/// The workspace Flynn's tools use, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub path: PathBuf,
    pub origin: WorkspaceOrigin,
    /// Why the current directory was passed over, for the user to read;
    /// `None` when it was not.
    pub note: Option<String>,
}

impl Workspace {
    /// `FLYNN_HOME/workspace`.
    pub fn default_for(home: &Path) -> PathBuf {
        home.join("workspace")
    }

    /// Picks the workspace: `configured` (`tools.workspace`) when set;
    /// else `current` (the CLI passes its current directory, the daemon
    /// passes `None`) when it is safe to expose to tools; else
    /// `FLYNN_HOME/workspace`, which is created (0700) if missing.
    pub fn resolve(
        configured: Option<&Path>,
        home: &Path,
        current: Option<&Path>,
        env: &dyn Env,
    ) -> Result<Workspace> {
        if let Some(path) = configured {
            return Ok(Workspace {
                path: path.to_path_buf(),
                origin: WorkspaceOrigin::Configured,
                note: None,
            });
        }
        let default = Workspace::default_for(home);
        let note = match current {
            Some(dir) => match unsafe_reason(dir, home, env) {
                None => {
                    return Ok(Workspace {
                        path: dir.to_path_buf(),
                        origin: WorkspaceOrigin::CurrentDir,
                        note: None,
                    });
                }
                Some(reason) => Some(format!(
                    "the current directory {} is {reason}, so tools work in {} instead (set tools.workspace to choose)",
                    dir.display(),
                    default.display()
                )),
            },
            None => None,
        };
        create_private(&default)?;
        Ok(Workspace {
            path: default,
            origin: WorkspaceOrigin::Default,
            note,
        })
    }
}

/// Why `dir` must not be the workspace unless the owner names it, if it
/// must not.
fn unsafe_reason(dir: &Path, home: &Path, env: &dyn Env) -> Option<&'static str> {
    let dir = canonical(dir);
    if dir.parent().is_none() {
        return Some("the root of the file system");
    }
    let user_home = env
        .var("HOME")
        .filter(|h| !h.trim().is_empty())
        .map(|h| canonical(Path::new(&h)));
    if user_home.as_deref() == Some(dir.as_path()) {
        return Some("your home directory");
    }
    if canonical(home).starts_with(&dir) {
        return Some("where Flynn keeps its data (FLYNN_HOME)");
    }
    None
}

/// The canonical form when the path exists, else the path as given.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Creates `dir` (and missing parents) readable by its owner only.
fn create_private(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| Error::Workspace {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::MapEnv;

    fn env(home: &Path) -> MapEnv {
        MapEnv::new().with("HOME", home.to_str().unwrap())
    }

    #[test]
    fn the_daemon_works_in_a_private_directory_under_flynn_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("data/flynn");
        let ws = Workspace::resolve(None, &home, None, &env(dir.path())).unwrap();
        assert_eq!(ws.path, home.join("workspace"));
        assert_eq!(ws.origin, WorkspaceOrigin::Default);
        assert_eq!(ws.note, None);
        assert!(ws.path.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&ws.path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
        }
    }

    #[test]
    fn a_configured_workspace_is_used_as_named_even_the_home_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::resolve(
            Some(dir.path()),
            &dir.path().join("flynn"),
            Some(Path::new("/")),
            &env(dir.path()),
        )
        .unwrap();
        assert_eq!(ws.path, dir.path());
        assert_eq!(ws.origin, WorkspaceOrigin::Configured);
        assert!(!dir.path().join("flynn").exists());
    }

    #[test]
    fn the_cli_keeps_a_safe_current_directory() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let home = dir.path().join("data");
        let ws = Workspace::resolve(None, &home, Some(&project), &env(dir.path())).unwrap();
        assert_eq!(
            (ws.path, ws.origin, ws.note),
            (project, WorkspaceOrigin::CurrentDir, None)
        );
        assert!(!home.exists());
    }

    #[test]
    fn the_cli_passes_over_the_root_the_home_and_flynn_home_parents() {
        let dir = tempfile::tempdir().unwrap();
        let user_home = dir.path().join("alice");
        let home = user_home.join(".local/share/flynn");
        std::fs::create_dir_all(&home).unwrap();
        let cases = [
            (PathBuf::from("/"), "the root of the file system"),
            (user_home.clone(), "your home directory"),
            (
                user_home.join(".local"),
                "where Flynn keeps its data (FLYNN_HOME)",
            ),
            (home.clone(), "where Flynn keeps its data (FLYNN_HOME)"),
        ];
        for (current, reason) in cases {
            let ws = Workspace::resolve(None, &home, Some(&current), &env(&user_home)).unwrap();
            assert_eq!(ws.path, home.join("workspace"), "{}", current.display());
            assert_eq!(ws.origin, WorkspaceOrigin::Default);
            assert_eq!(
                ws.note.as_deref(),
                Some(
                    format!(
                        "the current directory {} is {reason}, so tools work in {} instead (set tools.workspace to choose)",
                        current.display(),
                        home.join("workspace").display()
                    )
                    .as_str()
                )
            );
        }
    }
}
