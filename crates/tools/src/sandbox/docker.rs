//! Docker: one container per command, removed when it ends, with the
//! image's file system read-only, the workspace (and `writable`) mounted
//! at its own path, `readable` mounted read-only, hidden paths inside
//! those covered, no network unless `tools.sandbox.network` is true, no
//! capabilities, Flynn's user and group, and no variable of the host but
//! the `tools.env` names that are set (`-e NAME`: the value travels from
//! the `docker` client's environment, not on its command line).
//!
//! Killing the `docker` client does not stop the container, so the
//! container gets a name and is `docker kill`ed when the command is
//! abandoned (see [`super::Killer`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::view::Hidden;
use super::{Availability, SandboxError, find_program, first_line, not_found, run_probe};

/// One `docker run`.
pub(super) struct Run<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub network: bool,
    /// uid and gid to run as.
    pub user: Option<(u32, u32)>,
    /// Bind-mounted writable at the same path.
    pub mounts: &'a [PathBuf],
    /// Bind-mounted read-only at the same path.
    pub readable: &'a [PathBuf],
    /// Covered: an empty tmpfs over a directory, `/dev/null` over a file.
    pub hidden: &'a [Hidden],
    /// Names of variables the container gets from the client's
    /// environment.
    pub env: &'a [String],
    pub cwd: &'a Path,
    pub command: &'a str,
}

/// The arguments of `docker` for `run`.
pub(super) fn args(run: &Run<'_>) -> Result<Vec<OsString>, SandboxError> {
    let mut args: Vec<OsString> = ["run", "--rm", "-i", "--name", run.name, "--network"]
        .map(OsString::from)
        .to_vec();
    args.push(if run.network { "bridge" } else { "none" }.into());
    if let Some((uid, gid)) = run.user {
        args.push("--user".into());
        args.push(format!("{uid}:{gid}").into());
    }
    args.extend(
        [
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--tmpfs",
            "/tmp",
        ]
        .map(OsString::from),
    );
    for dir in run.mounts {
        let text = mountable(dir)?;
        args.push("-v".into());
        args.push(format!("{text}:{text}").into());
    }
    for path in run.readable {
        let text = mountable(path)?;
        args.push("-v".into());
        args.push(format!("{text}:{text}:ro").into());
    }
    for hidden in run.hidden {
        let text = mountable(&hidden.path)?;
        if hidden.dir {
            args.push("--tmpfs".into());
            args.push(text.into());
        } else {
            args.push("-v".into());
            args.push(format!("/dev/null:{text}:ro").into());
        }
    }
    for name in run.env {
        args.push("-e".into());
        args.push(name.into());
    }
    args.push("-w".into());
    args.push(run.cwd.into());
    args.push(run.image.into());
    args.extend(["sh", "-c"].map(OsString::from));
    args.push(run.command.into());
    Ok(args)
}

/// `path` as Docker's `-v` takes it.
fn mountable(path: &Path) -> Result<&str, SandboxError> {
    path.to_str()
        .filter(|t| !t.contains(':'))
        .ok_or_else(|| SandboxError::BadPath {
            path: path.to_path_buf(),
            reason: "Docker's -v cannot mount a path that contains ':' or is not UTF-8".to_owned(),
        })
}

/// Whether the client exists and the engine answers `docker info` in
/// time.
pub(super) async fn probe(program: &Path, timeout: Duration) -> Availability {
    let Some(path) = find_program(program) else {
        return Availability::Unavailable {
            reason: not_found(program),
        };
    };
    match run_probe(&path, &["info", "--format", "{{.ServerVersion}}"], timeout).await {
        Ok(output) if output.status.success() => {
            let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            Availability::Available {
                detail: format!("{}, engine {version}", path.display()),
            }
        }
        Ok(output) => Availability::Unavailable {
            reason: format!(
                "the Docker engine does not answer `docker info`: {}",
                first_line(&output.stderr)
            ),
        },
        Err(reason) => Availability::Unavailable {
            reason: format!("the Docker engine does not answer: {reason}"),
        },
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
    fn a_run_mounts_the_workspace_and_cuts_the_network() {
        let mounts = [PathBuf::from("/home/me/ws"), PathBuf::from("/cache")];
        let run = Run {
            name: "flynn-42-1",
            image: "debian:stable-slim",
            network: false,
            user: Some((1000, 1000)),
            mounts: &mounts,
            readable: &[],
            hidden: &[],
            env: &[],
            cwd: Path::new("/home/me/ws/src"),
            command: "cargo test",
        };
        assert_eq!(
            strings(&args(&run).unwrap()),
            [
                "run",
                "--rm",
                "-i",
                "--name",
                "flynn-42-1",
                "--network",
                "none",
                "--user",
                "1000:1000",
                "--cap-drop",
                "ALL",
                "--security-opt",
                "no-new-privileges",
                "--read-only",
                "--tmpfs",
                "/tmp",
                "-v",
                "/home/me/ws:/home/me/ws",
                "-v",
                "/cache:/cache",
                "-w",
                "/home/me/ws/src",
                "debian:stable-slim",
                "sh",
                "-c",
                "cargo test",
            ]
        );
        let networked = Run {
            network: true,
            user: None,
            ..run
        };
        let args = args(&networked).unwrap();
        assert_eq!(strings(&args)[5..8], ["--network", "bridge", "--cap-drop"]);
    }

    #[test]
    fn readable_paths_hidden_paths_and_named_variables_are_passed() {
        let mounts = [PathBuf::from("/home/me")];
        let readable = [PathBuf::from("/run/agent.sock")];
        let hidden = [
            Hidden {
                path: "/home/me/.local/share/flynn".into(),
                dir: true,
            },
            Hidden {
                path: "/home/me/flynn.yaml".into(),
                dir: false,
            },
        ];
        let env = ["GOPATH".to_owned()];
        let run = Run {
            name: "n",
            image: "i",
            network: false,
            user: None,
            mounts: &mounts,
            readable: &readable,
            hidden: &hidden,
            env: &env,
            cwd: Path::new("/home/me"),
            command: "true",
        };
        let args = args(&run).unwrap();
        let args = strings(&args);
        let first = args.iter().position(|a| *a == "-v").unwrap();
        assert_eq!(
            args[first..],
            [
                "-v",
                "/home/me:/home/me",
                "-v",
                "/run/agent.sock:/run/agent.sock:ro",
                "--tmpfs",
                "/home/me/.local/share/flynn",
                "-v",
                "/dev/null:/home/me/flynn.yaml:ro",
                "-e",
                "GOPATH",
                "-w",
                "/home/me",
                "i",
                "sh",
                "-c",
                "true",
            ]
        );
    }

    #[test]
    fn a_path_docker_cannot_mount_is_refused() {
        let mounts = [PathBuf::from("/odd:dir")];
        let run = Run {
            name: "n",
            image: "i",
            network: false,
            user: None,
            mounts: &mounts,
            readable: &[],
            hidden: &[],
            env: &[],
            cwd: Path::new("/odd:dir"),
            command: "true",
        };
        assert_eq!(
            args(&run).unwrap_err().to_string(),
            "cannot make /odd:dir writable in the sandbox: Docker's -v cannot mount a path that \
             contains ':' or is not UTF-8"
        );
    }
}
