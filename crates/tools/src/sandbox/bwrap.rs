//! bubblewrap: a file system made of the host's system directories
//! read-only (merged-`/usr` symlinks recreated), fresh `/dev`, `/proc` and
//! `/tmp`, the workspace and `writable` read-write, `readable` read-only,
//! empty directories (or files) over the hidden paths inside those, and
//! nothing else of the host; new namespaces for everything (network
//! included unless `tools.sandbox.network` is true).
//!
//! bwrap runs as the leader of the command's process group; with its own
//! PID namespace, killing it (the group kill does) also kills whatever the
//! command left inside, even processes that left the group.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::view::{SystemPath, View};
use super::{Availability, find_program, first_line, not_found, run_probe};

/// The arguments that run `sh -c <command>` in `cwd` with what `view`
/// shows.
pub(super) fn args(view: &View, network: bool, cwd: &Path, command: &str) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    for entry in &view.system {
        match entry {
            SystemPath::Dir(path) => {
                args.extend(["--ro-bind".into(), path.into(), path.into()]);
            }
            SystemPath::Link { path, target } => {
                args.extend(["--symlink".into(), target.into(), path.into()]);
            }
        }
    }
    args.extend(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"].map(OsString::from));
    // Parents before children, whichever list they come from: a hidden
    // directory inside the workspace is covered after the workspace is
    // mounted, a workspace inside /tmp or inside a hidden directory
    // after those.
    let mut mounts: Vec<(&Path, [OsString; 3])> = Vec::new();
    for hidden in &view.hidden {
        let path = hidden.path.as_path();
        if hidden.dir {
            mounts.push((path, ["--tmpfs".into(), path.into(), OsString::new()]));
        } else {
            mounts.push((path, ["--ro-bind".into(), "/dev/null".into(), path.into()]));
        }
    }
    for dir in &view.writable {
        mounts.push((dir, ["--bind".into(), dir.into(), dir.into()]));
    }
    for readable in &view.readable {
        let path = readable.path.as_path();
        mounts.push((path, ["--ro-bind".into(), path.into(), path.into()]));
    }
    mounts.sort_by_key(|(path, _)| path.components().count());
    for (_, mount) in mounts {
        args.extend(mount.into_iter().filter(|arg| !arg.is_empty()));
    }
    for readable in &view.readable {
        if let Some(alias) = &readable.alias {
            args.extend([
                "--symlink".into(),
                readable.path.as_os_str().to_owned(),
                alias.into(),
            ]);
        }
    }
    args.push("--unshare-all".into());
    if network {
        args.push("--share-net".into());
    }
    args.extend(
        [
            "--die-with-parent",
            // No TIOCSTI into a terminal Flynn was started from.
            "--new-session",
            "--chdir",
        ]
        .map(OsString::from),
    );
    args.push(cwd.into());
    args.extend(["--", "sh", "-c"].map(OsString::from));
    args.push(command.into());
    args
}

/// Whether `program` exists and can set up its namespaces here: it runs
/// `true` in a sandbox like the real ones.
pub(super) async fn probe(program: &Path, timeout: Duration) -> Availability {
    let Some(path) = find_program(program) else {
        return Availability::Unavailable {
            reason: not_found(program),
        };
    };
    let trial = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-all",
        "--die-with-parent",
        "--",
        "true",
    ];
    match run_probe(&path, &trial, timeout).await {
        Ok(output) if output.status.success() => {
            let version = run_probe(&path, &["--version"], timeout)
                .await
                .ok()
                .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
                .filter(|v| !v.is_empty());
            Availability::Available {
                detail: match version {
                    Some(version) => format!("{} ({version})", path.display()),
                    None => path.display().to_string(),
                },
            }
        }
        Ok(output) => Availability::Unavailable {
            reason: format!(
                "{} cannot create its sandbox here ({}); unprivileged user namespaces may be disabled \
                 (sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap)",
                path.display(),
                first_line(&output.stderr)
            ),
        },
        Err(reason) => Availability::Unavailable { reason },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::PathBuf;

    use super::super::view::{Hidden, Readable};
    use super::*;

    fn strings(args: &[OsString]) -> Vec<&str> {
        args.iter().map(|a| a.to_str().unwrap()).collect()
    }

    fn merged_usr() -> Vec<SystemPath> {
        vec![
            SystemPath::Dir("/usr".into()),
            SystemPath::Link {
                path: "/bin".into(),
                target: "usr/bin".into(),
            },
            SystemPath::Link {
                path: "/lib".into(),
                target: "usr/lib".into(),
            },
            SystemPath::Dir("/etc".into()),
        ]
    }

    #[test]
    fn only_the_system_and_the_workspace_are_there() {
        let view = View {
            system: merged_usr(),
            writable: vec![PathBuf::from("/ws"), PathBuf::from("/cache")],
            readable: vec![],
            hidden: vec![],
        };
        assert_eq!(
            strings(&args(&view, false, Path::new("/ws/sub"), "make test")),
            [
                "--ro-bind",
                "/usr",
                "/usr",
                "--symlink",
                "usr/bin",
                "/bin",
                "--symlink",
                "usr/lib",
                "/lib",
                "--ro-bind",
                "/etc",
                "/etc",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--bind",
                "/ws",
                "/ws",
                "--bind",
                "/cache",
                "/cache",
                "--unshare-all",
                "--die-with-parent",
                "--new-session",
                "--chdir",
                "/ws/sub",
                "--",
                "sh",
                "-c",
                "make test",
            ]
        );
    }

    #[test]
    fn hidden_paths_are_covered_after_what_contains_them() {
        // The workspace is $HOME, with FLYNN_HOME and the config inside;
        // another project lives inside FLYNN_HOME; an ssh-agent socket is
        // readable under its symlinked name.
        let view = View {
            system: vec![SystemPath::Dir("/etc".into())],
            writable: vec![
                PathBuf::from("/home/me"),
                PathBuf::from("/home/me/.local/share/flynn/work"),
            ],
            readable: vec![Readable {
                path: "/run/agent.sock".into(),
                alias: Some("/var/run/agent.sock".into()),
            }],
            hidden: vec![
                Hidden {
                    path: "/etc/flynn".into(),
                    dir: true,
                },
                Hidden {
                    path: "/home/me/.local/share/flynn".into(),
                    dir: true,
                },
                Hidden {
                    path: "/home/me/flynn.yaml".into(),
                    dir: false,
                },
            ],
        };
        let args = args(&view, true, Path::new("/home/me"), "ls");
        let args = strings(&args);
        let end = args.iter().position(|a| *a == "--unshare-all").unwrap();
        assert_eq!(
            args[3..end],
            [
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--tmpfs",
                "/etc/flynn",
                "--bind",
                "/home/me",
                "/home/me",
                "--ro-bind",
                "/run/agent.sock",
                "/run/agent.sock",
                "--ro-bind",
                "/dev/null",
                "/home/me/flynn.yaml",
                "--tmpfs",
                "/home/me/.local/share/flynn",
                "--bind",
                "/home/me/.local/share/flynn/work",
                "/home/me/.local/share/flynn/work",
                "--symlink",
                "/run/agent.sock",
                "/var/run/agent.sock",
            ]
        );
        assert_eq!(args[end + 1], "--share-net");
    }
}
