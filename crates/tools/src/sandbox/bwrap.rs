//! bubblewrap: the host's file system read-only, fresh `/dev`, `/proc` and
//! `/tmp`, the workspace writable, and new namespaces for everything else
//! (network included unless `tools.sandbox.network` is true).
//!
//! bwrap runs as the leader of the command's process group; with its own
//! PID namespace, killing it (the group kill does) also kills whatever the
//! command left inside, even processes that left the group.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Availability, find_program, first_line, not_found, run_probe};

/// The arguments that run `sh -c <command>` in `cwd` with `writable`
/// bind-mounted writable.
pub(super) fn args(
    writable: &[PathBuf],
    network: bool,
    cwd: &Path,
    command: &str,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    // After the tmpfs, so a workspace under /tmp is mounted over it.
    for dir in writable {
        args.push("--bind".into());
        args.push(dir.into());
        args.push(dir.into());
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
    use super::*;

    fn strings(args: &[OsString]) -> Vec<&str> {
        args.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn the_workspace_is_writable_and_the_rest_read_only() {
        let writable = [PathBuf::from("/ws"), PathBuf::from("/cache")];
        assert_eq!(
            strings(&args(&writable, false, Path::new("/ws/sub"), "make test")),
            [
                "--ro-bind",
                "/",
                "/",
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
    fn network_true_shares_the_network_namespace() {
        let args = args(&[PathBuf::from("/ws")], true, Path::new("/ws"), "true");
        let args = strings(&args);
        let unshare = args.iter().position(|a| *a == "--unshare-all").unwrap();
        assert_eq!(args[unshare + 1], "--share-net");
    }
}
