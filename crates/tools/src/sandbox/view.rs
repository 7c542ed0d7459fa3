//! What a sandboxed command may see of the host, worked out once per
//! command from `tools.sandbox`, the workspace and the paths Flynn keeps
//! hidden: the system directories (read-only), the workspace and
//! `writable` (read-write), `readable` (read-only), and, among those, the
//! hidden paths that must look empty. bubblewrap and Docker mount exactly
//! this; Landlock turns it into rules.

use std::path::{Path, PathBuf};

use flynn_protocol::config::SandboxConfig;

use super::SandboxError;

/// The host's system directories commands may read: what programs,
/// libraries and their configuration need. Those missing on a host are
/// left out; those that are symlinks (merged `/usr`) stay symlinks.
pub const SYSTEM_DIRS: [&str; 9] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Flynn's system-wide configuration directory: always hidden.
pub const SYSTEM_CONFIG: &str = "/etc/flynn";

/// One entry of [`SYSTEM_DIRS`] as this host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SystemPath {
    Dir(PathBuf),
    /// A symlink, such as `/bin -> usr/bin`.
    Link {
        path: PathBuf,
        target: PathBuf,
    },
}

impl SystemPath {
    pub fn path(&self) -> &Path {
        match self {
            SystemPath::Dir(path) | SystemPath::Link { path, .. } => path,
        }
    }
}

/// A `readable` path: where it really is, and the name it was given when
/// a symlink leads there from outside everything else the command sees
/// (`/var/run/docker.sock` for `/run/docker.sock`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Readable {
    pub path: PathBuf,
    pub alias: Option<PathBuf>,
}

/// A hidden path inside something the command sees: an empty directory
/// or an empty file takes its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hidden {
    pub path: PathBuf,
    pub dir: bool,
}

/// What one command may see; every path canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    pub system: Vec<SystemPath>,
    /// The workspace first, then `tools.sandbox.writable`.
    pub writable: Vec<PathBuf>,
    pub readable: Vec<Readable>,
    pub hidden: Vec<Hidden>,
}

impl View {
    /// Looks at the host: which system directories exist, which
    /// configured paths exist, which hidden paths lie inside something
    /// shown. A hidden path that *is* the workspace is an error: nothing
    /// could run without showing it.
    pub fn new(
        config: &SandboxConfig,
        workspace: &Path,
        hidden: &[PathBuf],
    ) -> Result<View, SandboxError> {
        let system = system_paths(Path::new("/"));
        let writable = writable_dirs(config, workspace)?;
        let mut view = View {
            system,
            writable,
            readable: Vec::new(),
            hidden: Vec::new(),
        };
        let base = view.writable[0].clone();
        for path in &config.readable {
            let named = if path.is_absolute() {
                path.clone()
            } else {
                base.join(path)
            };
            let Ok(real) = std::fs::canonicalize(&named) else {
                tracing::warn!(
                    path = %named.display(),
                    "tools.sandbox.readable names a path that does not exist; skipped"
                );
                continue;
            };
            if view.readable.iter().any(|r| r.path == real) {
                continue;
            }
            let alias = (named != real && !view.shows(&named)).then_some(named);
            view.readable.push(Readable { path: real, alias });
        }
        if config.network
            && let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf")
            && !view.shows(&resolv)
        {
            // systemd-resolved's stub file lives under /run.
            view.readable.push(Readable {
                path: resolv,
                alias: None,
            });
        }
        let candidates =
            std::iter::once(PathBuf::from(SYSTEM_CONFIG)).chain(hidden.iter().cloned());
        for candidate in candidates {
            let Ok(path) = std::fs::canonicalize(&candidate) else {
                continue;
            };
            if path == base {
                return Err(SandboxError::Exposed {
                    setting: "tools.workspace",
                    dir: base,
                    relation: "is",
                    hidden: path,
                    fix: "set tools.workspace to a directory of its own (commands run there)"
                        .to_owned(),
                });
            }
            let explicit =
                view.writable[1..].contains(&path) || view.readable.iter().any(|r| r.path == path);
            let inside = view
                .roots()
                .any(|root| path.starts_with(root) && path != root);
            if inside && !explicit && !view.hidden.iter().any(|h| h.path == path) {
                view.hidden.push(Hidden {
                    dir: path.is_dir(),
                    path,
                });
            }
        }
        Ok(view)
    }

    /// The canonical roots of what the command sees (symlinked system
    /// entries resolve into the others).
    fn roots(&self) -> impl Iterator<Item = &Path> {
        self.system
            .iter()
            .filter_map(|s| match s {
                SystemPath::Dir(path) => Some(path.as_path()),
                SystemPath::Link { .. } => None,
            })
            .chain(self.writable.iter().map(PathBuf::as_path))
            .chain(self.readable.iter().map(|r| r.path.as_path()))
    }

    /// Whether `path` (as named, symlinks not resolved) lies in something
    /// the command sees.
    fn shows(&self, path: &Path) -> bool {
        self.system
            .iter()
            .map(SystemPath::path)
            .chain(self.writable.iter().map(PathBuf::as_path))
            .chain(self.readable.iter().map(|r| r.path.as_path()))
            .any(|root| path.starts_with(root))
    }

    /// Landlock can only add rights: a hidden path inside a directory it
    /// opens for writing stays open. That refuses to run.
    pub fn landlock_conflict(&self) -> Option<SandboxError> {
        for hidden in &self.hidden {
            for (index, dir) in self.writable.iter().enumerate() {
                if hidden.path.starts_with(dir) {
                    let (setting, fix) = if index == 0 {
                        (
                            "tools.workspace",
                            "set tools.workspace to a directory that does not contain it, or use tools.sandbox.mode: bubblewrap (which hides it)",
                        )
                    } else {
                        (
                            "tools.sandbox.writable",
                            "remove that directory from tools.sandbox.writable or name one inside it, or use tools.sandbox.mode: bubblewrap (which hides it)",
                        )
                    };
                    return Some(SandboxError::Exposed {
                        setting,
                        dir: dir.clone(),
                        relation: "contains",
                        hidden: hidden.path.clone(),
                        fix: format!(
                            "Landlock cannot hide a path inside a directory it opens; {fix}"
                        ),
                    });
                }
            }
        }
        None
    }

    /// What Landlock lets a command read: each system directory and
    /// `readable` path whole, except that a directory with a hidden path
    /// inside is only listable, and its other entries (not symlinks) are
    /// granted one by one.
    pub fn read_grants(&self) -> Vec<ReadGrant> {
        let hidden: Vec<&Path> = self.hidden.iter().map(|h| h.path.as_path()).collect();
        let mut grants = Vec::new();
        let roots = self
            .system
            .iter()
            .filter_map(|s| match s {
                SystemPath::Dir(path) => Some(path.as_path()),
                SystemPath::Link { .. } => None,
            })
            .chain(self.readable.iter().map(|r| r.path.as_path()));
        for root in roots {
            split(root, &hidden, &mut grants);
        }
        grants
    }
}

/// A read right Landlock grants on a path and everything beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadGrant {
    /// Read, list and run.
    Whole(PathBuf),
    /// List only (names, not contents).
    List(PathBuf),
}

fn split(root: &Path, hidden: &[&Path], grants: &mut Vec<ReadGrant>) {
    if hidden.contains(&root) {
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(root)) {
        grants.push(ReadGrant::Whole(root.to_path_buf()));
        return;
    }
    grants.push(ReadGrant::List(root.to_path_buf()));
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| !t.is_symlink()))
        .map(|entry| entry.path())
        .collect();
    children.sort();
    for child in children {
        split(&child, hidden, grants);
    }
}

/// The entries of [`SYSTEM_DIRS`] that exist under `root` (`/` but in
/// tests), as they are: directories or symlinks.
pub(crate) fn system_paths(root: &Path) -> Vec<SystemPath> {
    SYSTEM_DIRS
        .iter()
        .filter_map(|dir| {
            let path = root.join(dir.trim_start_matches('/'));
            let meta = std::fs::symlink_metadata(&path).ok()?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).ok()?;
                Some(SystemPath::Link {
                    path: PathBuf::from(dir),
                    target,
                })
            } else if meta.is_dir() {
                Some(SystemPath::Dir(PathBuf::from(dir)))
            } else {
                None
            }
        })
        .collect()
}

/// The workspace and the `writable` directories that exist (relative ones
/// are in the workspace), canonical and without repeats.
pub(crate) fn writable_dirs(
    config: &SandboxConfig,
    workspace: &Path,
) -> Result<Vec<PathBuf>, SandboxError> {
    let workspace_dir = std::fs::canonicalize(workspace).map_err(|e| SandboxError::BadPath {
        path: workspace.to_path_buf(),
        reason: format!("the workspace cannot be opened: {e}"),
    })?;
    let mut dirs = vec![workspace_dir];
    for dir in &config.writable {
        let dir = if dir.is_absolute() {
            dir.clone()
        } else {
            workspace.join(dir)
        };
        match std::fs::canonicalize(&dir) {
            Ok(dir) if dir.is_dir() => {
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
            _ => tracing::warn!(
                dir = %dir.display(),
                "tools.sandbox.writable names a directory that does not exist; skipped"
            ),
        }
    }
    Ok(dirs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn config(writable: &[&Path], readable: &[&Path]) -> SandboxConfig {
        SandboxConfig {
            writable: writable.iter().map(|p| p.to_path_buf()).collect(),
            readable: readable.iter().map(|p| p.to_path_buf()).collect(),
            ..SandboxConfig::default()
        }
    }

    #[test]
    fn system_directories_are_taken_as_the_host_has_them() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("usr/bin", root.path().join("bin")).unwrap();
        std::fs::write(root.path().join("opt"), "not a directory").unwrap();
        assert_eq!(
            system_paths(root.path()),
            [
                SystemPath::Dir("/usr".into()),
                SystemPath::Link {
                    path: "/bin".into(),
                    target: "usr/bin".into()
                },
                SystemPath::Dir("/etc".into()),
            ]
        );
    }

    #[test]
    fn hidden_paths_inside_what_is_shown_are_kept_and_others_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (ws, home, outside, socket_dir) = (
            base.join("ws"),
            base.join("ws/.flynn"),
            base.join("elsewhere"),
            base.join("sockets"),
        );
        for d in [&ws, &home, &outside, &socket_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ws.join("config.yaml"), "secret").unwrap();
        let view = View::new(
            &config(&[], &[&socket_dir]),
            &ws,
            &[
                home.clone(),
                outside,
                ws.join("config.yaml"),
                base.join("missing"),
            ],
        )
        .unwrap();
        assert_eq!(view.writable, std::slice::from_ref(&ws));
        assert_eq!(
            view.readable,
            [Readable {
                path: socket_dir,
                alias: None
            }]
        );
        let mut hidden = view.hidden.clone();
        // /etc/flynn exists on some hosts.
        hidden.retain(|h| h.path != Path::new(SYSTEM_CONFIG));
        assert_eq!(
            hidden,
            [
                Hidden {
                    path: home,
                    dir: true
                },
                Hidden {
                    path: ws.join("config.yaml"),
                    dir: false
                },
            ]
        );
        assert_eq!(
            view.landlock_conflict().unwrap().to_string(),
            format!(
                "tools.workspace is {ws}, which contains {ws}/.flynn, Flynn's own files (the \
                 gateway token, sessions, credentials), so commands do not run: Landlock cannot \
                 hide a path inside a directory it opens; set tools.workspace to a directory that \
                 does not contain it, or use tools.sandbox.mode: bubblewrap (which hides it)",
                ws = ws.display()
            )
        );
    }

    #[test]
    fn a_hidden_workspace_is_refused_and_an_explicit_readable_wins() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let error = View::new(&config(&[], &[]), &ws, std::slice::from_ref(&ws)).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "tools.workspace is {ws}, which is {ws}, Flynn's own files (the gateway token, \
                 sessions, credentials), so commands do not run: set tools.workspace to a \
                 directory of its own (commands run there)",
                ws = ws.display()
            )
        );
        let skills = ws.join("home/skills");
        std::fs::create_dir_all(&skills).unwrap();
        let view = View::new(&config(&[], &[&skills]), &ws, std::slice::from_ref(&skills)).unwrap();
        assert!(!view.hidden.iter().any(|h| h.path == skills), "{view:?}");
    }

    #[test]
    fn landlock_splits_a_readable_directory_around_a_hidden_one() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (ws, shared) = (base.join("ws"), base.join("shared"));
        std::fs::create_dir_all(shared.join("flynn")).unwrap();
        std::fs::create_dir_all(shared.join("tools/bin")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(shared.join("notes.txt"), "hi").unwrap();
        std::os::unix::fs::symlink("/", shared.join("root")).unwrap();
        let view = View::new(&config(&[], &[&shared]), &ws, &[shared.join("flynn")]).unwrap();
        assert_eq!(view.landlock_conflict(), None);
        let grants: Vec<ReadGrant> = view
            .read_grants()
            .into_iter()
            .filter(|g| match g {
                ReadGrant::Whole(p) | ReadGrant::List(p) => p.starts_with(&base),
            })
            .collect();
        assert_eq!(
            grants,
            [
                ReadGrant::List(shared.clone()),
                ReadGrant::Whole(shared.join("notes.txt")),
                ReadGrant::Whole(shared.join("tools")),
            ]
        );
    }
}
