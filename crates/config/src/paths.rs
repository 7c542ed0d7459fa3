//! Where Flynn keeps its data and looks for its config file.

use std::path::{Path, PathBuf};

use crate::env::{Env, non_empty};
use crate::error::{Error, Result};

/// Flynn's directories, resolved from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// All data (sessions.db, memory/, logs, the gateway token):
    /// `FLYNN_HOME`, else `$XDG_DATA_HOME/flynn`, else
    /// `~/.local/share/flynn`.
    pub home: PathBuf,
    /// The config file: the explicit path (`--config`), else `FLYNN_CONFIG`,
    /// else `$XDG_CONFIG_HOME/flynn/config.yaml`, else
    /// `~/.config/flynn/config.yaml`.
    pub config_file: PathBuf,
}

impl Paths {
    /// Resolves both paths. Empty variables count as unset, and
    /// `XDG_*_HOME` must be absolute to count (as the XDG spec says).
    pub fn resolve(explicit_config: Option<&Path>, env: &dyn Env) -> Result<Paths> {
        Ok(resolve(explicit_config, env)?.0)
    }
}

/// Creates `home` (`FLYNN_HOME`) when it does not exist, as a directory
/// only its owner may enter (0700 on unix): it holds every conversation,
/// memory and the gateway token. Its missing parents are created as
/// usual; an existing home is left as it is.
pub fn create_home(home: &Path) -> std::io::Result<()> {
    if home.is_dir() {
        return Ok(());
    }
    if let Some(parent) = home.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(home) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && home.is_dir() => Ok(()),
        other => other,
    }
}

/// The paths, and whether the config file was named (by `--config` or
/// `FLYNN_CONFIG`) rather than defaulted: a named file must exist.
pub(crate) fn resolve(explicit_config: Option<&Path>, env: &dyn Env) -> Result<(Paths, bool)> {
    let home = match non_empty(env, "FLYNN_HOME") {
        Some(home) => PathBuf::from(home),
        None => base_dir(env, "XDG_DATA_HOME", ".local/share")
            .ok_or(Error::NoHome {
                needed_for: "FLYNN_HOME",
            })?
            .join("flynn"),
    };
    let (config_file, named) = match (explicit_config, non_empty(env, "FLYNN_CONFIG")) {
        (Some(path), _) => (path.to_path_buf(), true),
        (None, Some(path)) => (PathBuf::from(path), true),
        (None, None) => (
            base_dir(env, "XDG_CONFIG_HOME", ".config")
                .ok_or(Error::NoHome {
                    needed_for: "FLYNN_CONFIG",
                })?
                .join("flynn/config.yaml"),
            false,
        ),
    };
    Ok((Paths { home, config_file }, named))
}

/// `$xdg_var` when set and absolute, else `$HOME/fallback`.
fn base_dir(env: &dyn Env, xdg_var: &str, fallback: &str) -> Option<PathBuf> {
    non_empty(env, xdg_var)
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| non_empty(env, "HOME").map(|home| PathBuf::from(home).join(fallback)))
}
