//! Landlock: kernel rules that a process applies to itself and passes on
//! to everything it starts. Commands may read and run what is in the
//! system directories (`/usr`, `/etc`...) and `tools.sandbox.readable`,
//! read and write the workspace and `tools.sandbox.writable`, and use a
//! few devices such as `/dev/null`; nothing else (not `$HOME`, not
//! `FLYNN_HOME`, not `/proc`, not `/tmp`). A hidden path inside a
//! read-only directory is cut out of it: that directory is only listable,
//! and its other entries are granted one by one. Unless
//! `tools.sandbox.network` is true, TCP connect and bind are denied when
//! the kernel has network rules (ABI 4), and on kernels with scopes (ABI 6)
//! abstract Unix sockets outside the sandbox are out of reach. Signals to
//! processes outside are always out of reach.
//!
//! What Landlock cannot do: take a right back inside a directory it
//! granted, so a hidden path inside the workspace makes the sandbox refuse
//! to run commands (see `View::landlock_conflict`); and govern connecting
//! to a Unix socket by its path (ssh-agent, D-Bus, Docker): those stay
//! reachable for a command that knows the path.
//!
//! Landlock restricts the calling *thread* and what it forks afterwards,
//! and Flynn forbids `unsafe` (so no `pre_exec` hook): each command is
//! spawned from a short-lived thread of its own that first restricts
//! itself, then spawns, and hands the child back.

use std::fmt;
use std::path::PathBuf;

use tokio::process::Command;

use super::view::ReadGrant;
use super::{SandboxError, SandboxedChild};

/// What this kernel's Landlock supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Support {
    /// The kernel's Landlock ABI version.
    pub abi: i32,
}

impl Support {
    /// Whether TCP connect and bind can be restricted (ABI 4, Linux 6.7).
    pub fn tcp_rules(self) -> bool {
        self.abi >= 4
    }
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Landlock ABI {} ({})",
            self.abi,
            if self.tcp_rules() {
                "file and TCP rules"
            } else {
                "file rules only, no network rules"
            }
        )
    }
}

/// What one command may do.
pub(super) struct Rules {
    /// Read rights, beside the devices.
    pub read: Vec<ReadGrant>,
    pub writable: Vec<PathBuf>,
    pub network: bool,
    pub support: Support,
}

#[cfg(target_os = "linux")]
mod imp {
    use std::path::{Path, PathBuf};

    use landlock::{
        ABI, Access, AccessFs, AccessNet, LandlockStatus, PathBeneath, PathFd, RestrictSelf,
        Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };
    use tokio::process::Command;

    use super::{Rules, Support};
    use crate::sandbox::view::ReadGrant;
    use crate::sandbox::{SandboxError, SandboxedChild};

    /// The file-system rights handled: those of ABI 5 (the newest this was
    /// tested with); older kernels enforce what they know.
    const FS_ABI: ABI = ABI::V5;

    /// Devices commands may open for reading and writing.
    const DEVICES: [&str; 6] = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ];

    pub(in crate::sandbox) fn probe() -> Result<Support, String> {
        // Without a ruleset or flags this only asks the kernel.
        let status = RestrictSelf::default()
            .no_new_privs(false)
            .apply()
            .map_err(|e| format!("cannot query Landlock: {e}"))?;
        match status.landlock {
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } => Ok(Support {
                abi: kernel_abi.unwrap_or(effective_abi as i32),
            }),
            LandlockStatus::NotEnabled => Err(
                "this kernel has Landlock but it is not enabled (add landlock to the lsm= boot option)"
                    .to_owned(),
            ),
            LandlockStatus::NotImplemented => Err(
                "this kernel has no Landlock (it needs Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK)"
                    .to_owned(),
            ),
        }
    }

    pub(in crate::sandbox) async fn spawn(
        command: Command,
        rules: Rules,
        cwd: PathBuf,
    ) -> Result<SandboxedChild, SandboxError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| SandboxError::Spawn {
            program: "sh".to_owned(),
            cwd: cwd.clone(),
            message: "no tokio runtime to run it on".to_owned(),
        })?;
        let (answer, answered) = tokio::sync::oneshot::channel();
        let thread_cwd = cwd.clone();
        let spawned = std::thread::Builder::new()
            .name("flynn-landlock".to_owned())
            .spawn(move || {
                let result = restrict(&rules).and_then(|()| {
                    // tokio::process needs the runtime to reap the child.
                    let _runtime = handle.enter();
                    crate::sandbox::start_child(command, "sh", &thread_cwd, None)
                });
                // If no one waits any more, dropping the child kills it.
                let _ = answer.send(result);
            });
        if let Err(error) = spawned {
            return Err(SandboxError::Spawn {
                program: "sh".to_owned(),
                cwd,
                message: format!("cannot start a thread to apply Landlock from: {error}"),
            });
        }
        answered.await.unwrap_or_else(|_| {
            Err(SandboxError::Landlock {
                message: "the thread applying it ended without an answer".to_owned(),
            })
        })
    }

    /// Restricts the calling thread (and what it starts from now on).
    fn restrict(rules: &Rules) -> Result<(), SandboxError> {
        let fail = |e: &dyn std::fmt::Display| SandboxError::Landlock {
            message: e.to_string(),
        };
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(FS_ABI))
            .map_err(|e| fail(&e))?
            .scope(Scope::Signal)
            .map_err(|e| fail(&e))?;
        if !rules.network {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(ABI::V4))
                .map_err(|e| fail(&e))?
                .scope(Scope::AbstractUnixSocket)
                .map_err(|e| fail(&e))?;
        }
        let mut created = ruleset.create().map_err(|e| fail(&e))?;
        for grant in &rules.read {
            let (path, access) = match grant {
                ReadGrant::Whole(path) => (path, AccessFs::from_read(FS_ABI)),
                ReadGrant::List(path) => (path, landlock::BitFlags::from(AccessFs::ReadDir)),
            };
            // A path that went away since the view was taken grants
            // nothing.
            let Ok(fd) = PathFd::new(path) else {
                continue;
            };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| fail(&e))?;
        }
        for dir in &rules.writable {
            created = created
                .add_rule(PathBeneath::new(open(dir)?, AccessFs::from_all(FS_ABI)))
                .map_err(|e| fail(&e))?;
        }
        for device in DEVICES {
            // Not every host has every device.
            if let Ok(fd) = PathFd::new(device) {
                created = created
                    .add_rule(PathBeneath::new(fd, AccessFs::from_file(FS_ABI)))
                    .map_err(|e| fail(&e))?;
            }
        }
        let status = created.restrict_self().map_err(|e| fail(&e))?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(SandboxError::Landlock {
                message: format!(
                    "the kernel enforced none of them (Landlock ABI {})",
                    rules.support.abi
                ),
            });
        }
        Ok(())
    }

    fn open(path: &Path) -> Result<PathFd, SandboxError> {
        PathFd::new(path).map_err(|e| SandboxError::Landlock {
            message: format!("cannot open {}: {e}", path.display()),
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::PathBuf;

    use tokio::process::Command;

    use super::{Rules, Support};
    use crate::sandbox::{Backend, SandboxError, SandboxedChild};

    pub(in crate::sandbox) fn probe() -> Result<Support, String> {
        Err("Landlock exists only on Linux".to_owned())
    }

    pub(in crate::sandbox) async fn spawn(
        _command: Command,
        _rules: Rules,
        _cwd: PathBuf,
    ) -> Result<SandboxedChild, SandboxError> {
        Err(SandboxError::Unavailable {
            mode: Backend::Landlock,
            reason: "Landlock exists only on Linux".to_owned(),
            fix: "set tools.sandbox.mode to auto".to_owned(),
        })
    }
}

pub(super) fn probe() -> Result<Support, String> {
    imp::probe()
}

/// Spawns `command` from a thread restricted by `rules`.
pub(super) async fn spawn(
    command: Command,
    rules: Rules,
    cwd: PathBuf,
) -> Result<SandboxedChild, SandboxError> {
    imp::spawn(command, rules, cwd).await
}
