//! The OS sandbox with real commands: what bubblewrap and Landlock let a
//! command write and reach, Docker's detection and command line (with a
//! fake `docker`), and the errors and report a user sees.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flynn_protocol::config::{SandboxConfig, SandboxMode, ToolsConfig};
use flynn_protocol::{ToolCall, ToolResult};
use flynn_tools::builtin;
use flynn_tools::sandbox::{Availability, Backend, Programs, Sandbox};
use flynn_tools::{ToolContext, ToolExecutor};
use serde_json::json;
use tempfile::TempDir;

use super::bwrap_runs;

/// A directory outside /tmp (which bubblewrap replaces with an empty
/// one), so "outside the workspace" means the host's file system.
fn scratch() -> TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn sandboxed(mode: SandboxMode, network: bool, workspace: &Path) -> Sandbox {
    Sandbox::new(
        SandboxConfig {
            mode,
            network,
            ..SandboxConfig::default()
        },
        workspace,
    )
}

/// What one command printed, and its exit code.
#[derive(Debug, PartialEq, Eq)]
struct Ran {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

async fn run(sandbox: &Sandbox, command: &str, workspace: &Path) -> Ran {
    let mut child = sandbox.spawn(command, workspace, workspace).await.unwrap();
    let (mut stdout, mut stderr) = (child.take_stdout().unwrap(), child.take_stderr().unwrap());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (status, _, _) = tokio::join!(
        child.wait(),
        tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out),
        tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut err),
    );
    Ran {
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
        code: status.unwrap().code(),
    }
}

fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "call-1".into(),
        name: name.into(),
        arguments,
    }
}

/// Why a write to `path` outside the workspace fails under bubblewrap:
/// the host is mounted read-only, except `/tmp`, which is a private empty
/// tmpfs (so a scratch directory there does not exist inside the sandbox,
/// e.g. when `CARGO_TARGET_DIR` is under `/tmp`). `missing` is how the
/// command words the second case.
fn blocked(path: &Path, missing: &str) -> String {
    if path.starts_with("/tmp") {
        missing.to_owned()
    } else {
        "Read-only file system".to_owned()
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap()
}

#[tokio::test]
async fn bubblewrap_lets_a_command_write_only_the_workspace() {
    if !bwrap_runs().await {
        return;
    }
    let (workspace, outside) = (scratch(), scratch());
    let target = canonical(outside.path()).join("escaped.txt");
    let sandbox = sandboxed(SandboxMode::Bubblewrap, false, workspace.path());
    let ran = run(
        &sandbox,
        &format!(
            "echo in > inside.txt && echo wrote; echo out > {}; echo tmp > /tmp/t && cat /tmp/t",
            target.display()
        ),
        workspace.path(),
    )
    .await;
    assert_eq!(
        ran,
        Ran {
            stdout: "wrote\ntmp\n".into(),
            stderr: format!(
                "sh: 1: cannot create {}: {}\n",
                target.display(),
                blocked(&target, "Directory nonexistent")
            ),
            code: Some(0),
        }
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn bubblewrap_cuts_the_network_unless_it_is_allowed() {
    if !bwrap_runs().await {
        return;
    }
    let workspace = scratch();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected || echo refused"
    );

    let isolated = sandboxed(SandboxMode::Bubblewrap, false, workspace.path());
    assert_eq!(
        run(&isolated, &connect, workspace.path()).await.stdout,
        "refused\n"
    );
    assert!(listener.accept().is_err(), "the sandbox reached the host");

    let networked = sandboxed(SandboxMode::Bubblewrap, true, workspace.path());
    assert_eq!(
        run(&networked, &connect, workspace.path()).await.stdout,
        "connected\n"
    );
    let (mut stream, _) = listener.accept().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
    assert_eq!(text, "hi\n");
}

#[tokio::test]
async fn shell_exec_and_process_start_run_in_the_sandbox() {
    if !bwrap_runs().await {
        return;
    }
    let (workspace, outside) = (scratch(), scratch());
    let target = canonical(outside.path()).join("x");
    let config = ToolsConfig {
        sandbox: SandboxConfig {
            mode: SandboxMode::Bubblewrap,
            ..SandboxConfig::default()
        },
        ..ToolsConfig::default()
    };
    let executor = ToolExecutor::new(Arc::new(builtin::registry(&config)), 64 * 1024);
    let ctx = ToolContext::new(workspace.path());
    let command = format!("touch ok; touch {}", target.display());
    assert_eq!(
        executor
            .execute(&call("shell.exec", json!({ "command": command })), &ctx)
            .await,
        ToolResult {
            tool_use_id: "call-1".into(),
            content: format!(
                "[stderr]\ntouch: cannot touch '{}': {}\n[exit code 1]",
                target.display(),
                blocked(&target, "No such file or directory")
            ),
            is_error: false,
        }
    );
    let started = executor
        .execute(&call("process.start", json!({ "command": command })), &ctx)
        .await;
    assert!(started.content.starts_with("started p1 "), "{started:?}");
    let status = executor
        .execute(
            &call("process.status", json!({"id": "p1", "wait_secs": 20})),
            &ctx,
        )
        .await;
    assert!(
        status.content.contains(" exited with code 1 after "),
        "{status:?}"
    );
    let output = executor
        .execute(&call("process.output", json!({"id": "p1"})), &ctx)
        .await;
    assert_eq!(
        output.content,
        format!(
            "touch: cannot touch '{}': {}\n",
            target.display(),
            blocked(&target, "No such file or directory")
        )
    );
    assert!(workspace.path().join("ok").exists());
    assert!(!target.exists());
}

/// Whether this kernel has Landlock; prints why the test does nothing
/// when it has not (no package can add it).
async fn landlock_runs() -> bool {
    let sandbox = Sandbox::new(SandboxConfig::default(), std::env::temp_dir());
    match sandbox.availability(Backend::Landlock).await {
        Availability::Available { .. } => true,
        Availability::Unavailable { reason } => {
            eprintln!("skipping the Landlock test: {reason}");
            false
        }
    }
}

#[tokio::test]
async fn landlock_lets_a_command_write_only_the_workspace() {
    if !landlock_runs().await {
        return;
    }
    let (workspace, outside) = (scratch(), scratch());
    let target = canonical(outside.path()).join("escaped.txt");
    let sandbox = sandboxed(SandboxMode::Landlock, false, workspace.path());
    let ran = run(
        &sandbox,
        &format!(
            "echo in > inside.txt && echo wrote; echo out > {}; ls / >/dev/null && echo read",
            target.display()
        ),
        workspace.path(),
    )
    .await;
    assert_eq!(
        ran,
        Ran {
            stdout: "wrote\nread\n".into(),
            stderr: format!(
                "sh: 1: cannot create {}: Permission denied\n",
                target.display()
            ),
            code: Some(0),
        }
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn landlock_blocks_tcp_when_the_kernel_can_and_says_so_when_not() {
    if !landlock_runs().await {
        return;
    }
    let workspace = scratch();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected || echo refused"
    );
    let sandbox = sandboxed(SandboxMode::Landlock, false, workspace.path());
    let report = sandbox.report().await;
    let expected = if report.network_isolated {
        "refused\n"
    } else {
        assert!(report.network.starts_with("NOT restricted"), "{report}");
        "connected\n"
    };
    assert_eq!(
        run(&sandbox, &connect, workspace.path()).await.stdout,
        expected
    );
    let open = sandboxed(SandboxMode::Landlock, true, workspace.path());
    assert_eq!(
        run(&open, &connect, workspace.path()).await.stdout,
        "connected\n"
    );
}

#[tokio::test]
async fn a_named_sandbox_that_is_missing_fails_saying_what_to_do() {
    let workspace = scratch();
    let sandbox =
        sandboxed(SandboxMode::Bubblewrap, false, workspace.path()).with_programs(Programs {
            bwrap: "/nonexistent/bwrap".into(),
            ..Programs::default()
        });
    let error = sandbox
        .spawn("true", workspace.path(), workspace.path())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "tools.sandbox.mode is bubblewrap, but /nonexistent/bwrap does not exist or is not \
         executable; install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: \
         `dnf install bubblewrap`) or set tools.sandbox.mode to auto or none"
    );
    // `auto` moves on to the next one instead.
    let auto = sandboxed(SandboxMode::Auto, false, workspace.path()).with_programs(Programs {
        bwrap: "/nonexistent/bwrap".into(),
        docker: "/nonexistent/docker".into(),
        ..Programs::default()
    });
    let report = auto.report().await;
    assert_ne!(report.active, Ok(Backend::Bubblewrap));
    assert!(report.active.is_ok(), "{report}");
}

#[tokio::test]
async fn docker_without_an_engine_is_not_available() {
    let workspace = scratch();
    let sandbox = sandboxed(SandboxMode::Docker, false, workspace.path());
    // No engine runs on the test hosts (and maybe no client either).
    let Availability::Unavailable { reason } = sandbox.availability(Backend::Docker).await else {
        panic!("a Docker engine answers here; this test expects none");
    };
    let error = sandbox
        .spawn("true", workspace.path(), workspace.path())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "tools.sandbox.mode is docker, but {reason}; start the Docker engine (or install \
             Docker) or set tools.sandbox.mode to auto, bubblewrap or landlock"
        )
    );
    let report = sandbox.report().await.to_string();
    assert!(
        report.starts_with("sandbox: none can run: tools.sandbox.mode is docker, but "),
        "{report}"
    );
    assert!(
        report.contains(&format!("\n  docker      not available: {reason}\n")),
        "{report}"
    );
}

/// Writes an executable script that answers `ping` at once, and waits
/// until it can be run (a file just written may be "busy" while another
/// test's thread forks).
fn fake_program(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    write!(file, "#!/bin/sh\n[ \"$1\" = ping ] && exit 0\n{body}\n").unwrap();
    drop(file);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for _ in 0..100 {
        match std::process::Command::new(&path).arg("ping").status() {
            Ok(status) if status.success() => return path,
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    panic!("{} never ran", path.display());
}

#[tokio::test]
async fn docker_that_does_not_answer_in_time_is_not_available() {
    let dir = scratch();
    let docker = fake_program(dir.path(), "docker", "exec sleep 30");
    let sandbox = sandboxed(SandboxMode::Docker, false, dir.path()).with_programs(Programs {
        docker: docker.clone(),
        probe_timeout: Duration::from_millis(300),
        ..Programs::default()
    });
    assert_eq!(
        sandbox.availability(Backend::Docker).await,
        Availability::Unavailable {
            reason: format!(
                "the Docker engine does not answer: `{} info --format {{{{.ServerVersion}}}}` did \
                 not answer within 0.3s",
                docker.display()
            )
        }
    );
}

#[tokio::test]
async fn docker_runs_the_command_in_a_container_with_the_workspace_mounted() {
    let dir = scratch();
    let log = dir.path().join("calls");
    let args = dir.path().join("args");
    let docker = fake_program(
        dir.path(),
        "docker",
        &format!(
            "echo \"$1\" >> {log}\n\
             if [ \"$1\" = info ]; then echo 27.1.0; exit 0; fi\n\
             printf '%s\\n' \"$@\" > {args}\n\
             echo ran",
            log = log.display(),
            args = args.display()
        ),
    );
    let workspace = canonical(dir.path()).join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let sandbox = sandboxed(SandboxMode::Docker, false, &workspace).with_programs(Programs {
        docker: docker.clone(),
        ..Programs::default()
    });
    let ran = run(&sandbox, "make test", &workspace).await;
    assert_eq!(ran.stdout, "ran\n");
    let uid = std::fs::metadata(&log)
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    let gid = std::fs::metadata(&log)
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .unwrap();
    let ws = workspace.display();
    let recorded = std::fs::read_to_string(&args).unwrap();
    // Containers are numbered per process: the name is flynn-<pid>-<n>.
    let name = recorded.lines().nth(4).unwrap().to_owned();
    assert!(
        name.starts_with(&format!("flynn-{}-", std::process::id())),
        "{name}"
    );
    assert_eq!(
        recorded,
        [
            "run",
            "--rm",
            "-i",
            "--name",
            &name,
            "--network",
            "none",
            "--user",
            &format!("{uid}:{gid}"),
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "-v",
            &format!("{ws}:{ws}"),
            "-w",
            &ws.to_string(),
            "debian:stable-slim",
            "sh",
            "-c",
            "make test",
            "",
        ]
        .join("\n")
    );
    // Detection ran once, however often it was asked.
    run(&sandbox, "true", &workspace).await;
    let report = sandbox.report().await;
    assert_eq!(report.active, Ok(Backend::Docker));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "info\nrun\nrun\n");
    assert_eq!(report.network, "isolated (--network none)");
}

#[tokio::test]
async fn the_report_names_the_active_sandbox() {
    let workspace = scratch();
    let sandbox = sandboxed(SandboxMode::Auto, false, workspace.path());
    let report = sandbox.report().await;
    println!("{report}");
    let lines: Vec<String> = report.to_string().lines().map(str::to_owned).collect();
    let backends: Vec<&str> = lines[4..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(backends, ["bubblewrap", "docker", "landlock", "none"]);
    if bwrap_runs().await {
        assert_eq!(report.active, Ok(Backend::Bubblewrap));
        assert_eq!(
            lines[..4],
            [
                "sandbox: bubblewrap (tools.sandbox.mode: auto)".to_owned(),
                "network: isolated (a network namespace of its own, loopback only)".to_owned(),
                format!(
                    "writable: {}, /tmp (private to each command)",
                    canonical(workspace.path()).display()
                ),
                "backends:".to_owned(),
            ]
        );
        assert!(lines[4].starts_with("  bubblewrap  active: "), "{report}");
        assert!(report.network_isolated);
    }
}
