//! The OS sandbox with real commands: what bubblewrap and Landlock let a
//! command read, write and reach (none of the host's secrets: not
//! FLYNN_HOME, not ~/.ssh, not a Unix socket, not Flynn's environment),
//! Docker's detection and command line (with a fake `docker`), and the
//! errors and report a user sees.

use std::ffi::OsString;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flynn_protocol::config::{SandboxConfig, SandboxMode, ToolsConfig};
use flynn_protocol::{ToolCall, ToolResult};
use flynn_tools::builtin;
use flynn_tools::sandbox::{
    Availability, Backend, Programs, SYSTEM_DIRS, Sandbox, SandboxPaths, Strength,
};
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
            // Nothing of the host outside the workspace is there at all.
            stderr: format!(
                "sh: 1: cannot create {}: Directory nonexistent\n",
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
                "[stderr]\ntouch: cannot touch '{}': No such file or directory\n[exit code 1]",
                target.display()
            ),
            is_error: false,
            images: Vec::new(),
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
            "touch: cannot touch '{}': No such file or directory\n",
            target.display()
        )
    );
    assert!(workspace.path().join("ok").exists());
    assert!(!target.exists());
}

/// A host with secrets around the workspace: a FLYNN_HOME with a gateway
/// token, a home with an ssh key, a listening Unix socket (an ssh-agent,
/// D-Bus or Docker), all outside the workspace, and an environment with
/// tokens and API keys. The environment is given to the sandbox
/// ([`Sandbox::with_host_env`]) as Flynn's own would be, so nothing of
/// the test process changes.
struct Host {
    workspace: TempDir,
    _around: TempDir,
    flynn_home: PathBuf,
    home: PathBuf,
    socket: PathBuf,
    listener: UnixListener,
    env: Vec<(OsString, OsString)>,
    secrets: Vec<String>,
}

/// Fails the test, saying what to install, unless `program` is in a
/// system directory (what a sandboxed command can run).
fn needs(program: &str) {
    let found = ["/usr/bin", "/usr/local/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join(program).exists());
    assert!(
        found,
        "{program} is not installed in /usr/bin or /usr/local/bin; the sandbox tests run it \
         inside the sandbox. Run scripts/install-test-deps.sh (apt-get install {program})"
    );
}

impl Host {
    fn new() -> Host {
        static HOSTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let tag = format!(
            "{}-{}",
            std::process::id(),
            HOSTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let (workspace, around) = (scratch(), scratch());
        let base = canonical(around.path());
        let flynn_home = base.join("flynn-home");
        let home = base.join("home");
        std::fs::create_dir_all(&flynn_home).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        let token = format!("gateway-token-{tag}");
        let key = format!("ssh-private-key-{tag}");
        std::fs::write(flynn_home.join("gateway.token"), &token).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), &key).unwrap();
        let socket = base.join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let secret_vars = [
            ("FLYNN_GATEWAY_TOKEN", format!("gw-env-{tag}")),
            ("TELEGRAM_BOT_TOKEN", format!("telegram-{tag}")),
            ("ANTHROPIC_API_KEY", format!("sk-ant-{tag}")),
            ("SSH_AUTH_SOCK", socket.display().to_string()),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                format!("unix:path={}", socket.display()),
            ),
            ("XDG_RUNTIME_DIR", base.display().to_string()),
        ];
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), std::env::var_os("PATH").unwrap()),
            ("HOME".into(), home.clone().into()),
            ("LANG".into(), "C.UTF-8".into()),
        ];
        let mut secrets = vec![token, key];
        for (name, value) in secret_vars {
            env.push((name.into(), value.clone().into()));
            if name.ends_with("TOKEN") || name.ends_with("KEY") {
                secrets.push(value);
            }
        }
        Host {
            workspace,
            _around: around,
            flynn_home,
            home,
            socket,
            listener,
            env,
            secrets,
        }
    }

    fn workspace(&self) -> &Path {
        self.workspace.path()
    }

    /// A command that tries every way to the secrets, one per line.
    fn snoop(&self) -> String {
        let (flynn_home, home, socket) = (
            self.flynn_home.display(),
            self.home.display(),
            self.socket.display(),
        );
        [
            "env".to_owned(),
            "echo ---".to_owned(),
            "tr '\\0' '\\n' < /proc/self/environ".to_owned(),
            format!("cat {flynn_home}/gateway.token"),
            format!("ls -A {home}"),
            format!("cat {home}/.ssh/id_ed25519"),
            "ls -A ~/.ssh".to_owned(),
            format!("test -S {socket} && echo socket-visible"),
            format!(
                "python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); \
                 s.connect(sys.argv[1]); print(\"socket-connected\")' {socket} 2>/dev/null \
                 || echo socket-unreachable"
            ),
        ]
        .join("\n")
    }

    /// Fails the test if any secret shows in what `ran` printed.
    fn assert_nothing_leaked(&self, ran: &Ran) {
        for secret in &self.secrets {
            assert!(
                !ran.stdout.contains(secret.as_str()) && !ran.stderr.contains(secret.as_str()),
                "{secret} reached the command: {ran:?}"
            );
        }
    }

    /// Whether something connected to the socket.
    fn socket_was_reached(&self) -> bool {
        self.listener.accept().is_ok()
    }
}

/// The names `env` printed before the `---` line, less those the shell
/// adds itself.
fn env_names(stdout: &str) -> Vec<String> {
    let mut names: Vec<String> = stdout
        .split("---\n")
        .next()
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.to_owned()))
        .filter(|name| !["PWD", "OLDPWD", "SHLVL", "_"].contains(&name.as_str()))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn bubblewrap_shows_no_secret_of_the_host() {
    if !bwrap_runs().await {
        return;
    }
    needs("python3");
    let host = Host::new();
    let sandbox = sandboxed(SandboxMode::Bubblewrap, false, host.workspace())
        .with_host_env(host.env.clone())
        .with_paths(&SandboxPaths::flynn(&host.flynn_home, None));
    let ran = run(&sandbox, &host.snoop(), host.workspace()).await;
    host.assert_nothing_leaked(&ran);
    assert_eq!(env_names(&ran.stdout), ["HOME", "LANG", "PATH", "TMPDIR"]);
    assert!(ran.stdout.lines().any(|l| l == "HOME=/tmp"), "{ran:?}");
    assert!(ran.stdout.ends_with("\nsocket-unreachable\n"), "{ran:?}");
    assert!(!host.socket_was_reached());
    let (flynn_home, home) = (host.flynn_home.display(), host.home.display());
    assert_eq!(
        ran.stderr,
        format!(
            "cat: {flynn_home}/gateway.token: No such file or directory\n\
             ls: cannot access '{home}': No such file or directory\n\
             cat: {home}/.ssh/id_ed25519: No such file or directory\n\
             ls: cannot access '/tmp/.ssh': No such file or directory\n"
        )
    );
}

#[tokio::test]
async fn tools_env_passes_a_named_variable_and_readable_opens_a_socket() {
    if !bwrap_runs().await {
        return;
    }
    needs("python3");
    let host = Host::new();
    let mut env = host.env.clone();
    env.push(("FLYNN_TEST_PASSED".into(), "passed on purpose".into()));
    let sandbox = Sandbox::new(
        SandboxConfig {
            mode: SandboxMode::Bubblewrap,
            readable: vec![host.socket.clone()],
            ..SandboxConfig::default()
        },
        host.workspace(),
    )
    .with_env(vec![
        "FLYNN_TEST_PASSED".to_owned(),
        "NOT_SET_ANYWHERE".to_owned(),
    ])
    .with_host_env(env);
    let command = format!(
        "echo \"$FLYNN_TEST_PASSED\"; echo \"${{ANTHROPIC_API_KEY:-unset}}\"; \
         python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); \
         s.connect(sys.argv[1]); s.sendall(b\"hello\"); print(\"socket-connected\")' {}",
        host.socket.display()
    );
    let ran = run(&sandbox, &command, host.workspace()).await;
    assert_eq!(
        ran,
        Ran {
            stdout: "passed on purpose\nunset\nsocket-connected\n".into(),
            stderr: String::new(),
            code: Some(0),
        }
    );
    let (mut stream, _) = host.listener.accept().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
    assert_eq!(text, "hello");
}

#[tokio::test]
async fn bubblewrap_hides_flynn_home_inside_a_workspace_set_to_home() {
    if !bwrap_runs().await {
        return;
    }
    // tools.workspace: $HOME, with FLYNN_HOME and the config inside it.
    let host = Host::new();
    let home = canonical(host.workspace());
    let flynn_home = home.join(".local/share/flynn");
    let config_dir = home.join(".config/flynn");
    std::fs::create_dir_all(&flynn_home).unwrap();
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(flynn_home.join("gateway.token"), &host.secrets[0]).unwrap();
    std::fs::write(config_dir.join("config.yaml"), &host.secrets[1]).unwrap();
    std::fs::write(home.join("project.txt"), "project\n").unwrap();
    let sandbox = sandboxed(SandboxMode::Bubblewrap, false, &home)
        .with_host_env(host.env.clone())
        .with_paths(&SandboxPaths::flynn(
            &flynn_home,
            Some(&config_dir.join("config.yaml")),
        ));
    let ran = run(
        &sandbox,
        "cat project.txt; cat .local/share/flynn/gateway.token; ls -A .local/share/flynn; \
         cat .config/flynn/config.yaml; echo x > .local/share/flynn/planted && echo planted",
        &home,
    )
    .await;
    host.assert_nothing_leaked(&ran);
    assert_eq!(
        ran,
        Ran {
            stdout: "project\nplanted\n".into(),
            stderr: "cat: .local/share/flynn/gateway.token: No such file or directory\n\
                     cat: .config/flynn/config.yaml: No such file or directory\n"
                .into(),
            code: Some(0),
        }
    );
    // What the command wrote went to the empty directory in its place.
    assert!(!flynn_home.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(flynn_home.join("gateway.token")).unwrap(),
        host.secrets[0]
    );
}

#[tokio::test]
async fn common_commands_still_work_in_bubblewrap() {
    if !bwrap_runs().await {
        return;
    }
    needs("python3");
    needs("git");
    let workspace = scratch();
    let sandbox = sandboxed(SandboxMode::Bubblewrap, false, workspace.path());
    let ran = run(
        &sandbox,
        "ls; echo hi > f; cat f; python3 -c 'print(1 + 1)'; git --version >/dev/null && echo git; \
         /usr/bin/env >/dev/null && echo env; cd ~ && pwd && touch x && echo home-writable",
        workspace.path(),
    )
    .await;
    assert_eq!(
        ran,
        Ran {
            stdout: "hi\n2\ngit\nenv\n/tmp\nhome-writable\n".into(),
            stderr: String::new(),
            code: Some(0),
        }
    );
}

#[tokio::test]
async fn no_sandbox_still_clears_the_environment() {
    let host = Host::new();
    let sandbox =
        sandboxed(SandboxMode::None, false, host.workspace()).with_host_env(host.env.clone());
    let ran = run(&sandbox, "env", host.workspace()).await;
    host.assert_nothing_leaked(&ran);
    assert_eq!(env_names(&ran.stdout), ["HOME", "LANG", "PATH"]);

    // Without an environment given, Flynn's own is the source: one of the
    // variables cargo gives the test process must not come through.
    let own = ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO", "HOSTNAME"]
        .into_iter()
        .find(|name| std::env::var_os(name).is_some())
        .expect("the test process has one of these variables");
    let plain = sandboxed(SandboxMode::None, false, host.workspace());
    let ran = run(
        &plain,
        &format!("echo \"${{{own}:-unset}}\""),
        host.workspace(),
    )
    .await;
    assert_eq!(ran.stdout, "unset\n");
}

/// Whether the Landlock tests run: they fail on a kernel without
/// Landlock (no package can add it), unless `FLYNN_TEST_SKIP_LANDLOCK=1`
/// says to skip them knowingly.
async fn landlock_runs() -> bool {
    if std::env::var_os("FLYNN_TEST_SKIP_LANDLOCK").is_some_and(|v| v == "1") {
        eprintln!("skipping the Landlock test: FLYNN_TEST_SKIP_LANDLOCK=1");
        return false;
    }
    let sandbox = Sandbox::new(SandboxConfig::default(), std::env::temp_dir());
    match sandbox.availability(Backend::Landlock).await {
        Availability::Available { .. } => true,
        Availability::Unavailable { reason } => panic!(
            "Landlock is not available ({reason}): the Landlock tests need Linux 5.13 or later \
             with landlock in its LSM list (boot with lsm=landlock,...); set \
             FLYNN_TEST_SKIP_LANDLOCK=1 to skip them on this machine"
        ),
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
            "echo in > inside.txt && echo wrote; echo out > {}; ls /usr/bin >/dev/null && echo read",
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
async fn landlock_shows_no_secret_file_or_variable_of_the_host() {
    if !landlock_runs().await {
        return;
    }
    needs("python3");
    let host = Host::new();
    let sandbox = sandboxed(SandboxMode::Landlock, false, host.workspace())
        .with_host_env(host.env.clone())
        .with_paths(&SandboxPaths::flynn(&host.flynn_home, None));
    let ran = run(&sandbox, &host.snoop(), host.workspace()).await;
    host.assert_nothing_leaked(&ran);
    assert_eq!(env_names(&ran.stdout), ["HOME", "LANG", "PATH"]);
    let workspace = canonical(host.workspace());
    let home_line = format!("HOME={}", workspace.display());
    assert!(ran.stdout.lines().any(|l| l == home_line), "{ran:?}");
    let (flynn_home, home) = (host.flynn_home.display(), host.home.display());
    assert_eq!(
        ran.stderr,
        format!(
            "sh: 3: cannot open /proc/self/environ: Permission denied\n\
             cat: {flynn_home}/gateway.token: Permission denied\n\
             ls: cannot open directory '{home}': Permission denied\n\
             cat: {home}/.ssh/id_ed25519: Permission denied\n\
             ls: cannot access '{}/.ssh': No such file or directory\n",
            workspace.display()
        )
    );
    // What Landlock cannot do, as docs/tools.md says: connecting to a
    // Unix socket by its path is not governed by its rules.
    assert!(
        ran.stdout.ends_with("\nsocket-visible\nsocket-connected\n"),
        "{ran:?}"
    );
    assert!(host.socket_was_reached());
}

#[tokio::test]
async fn landlock_refuses_a_workspace_that_contains_flynn_home() {
    if !landlock_runs().await {
        return;
    }
    let workspace = scratch();
    let home = canonical(workspace.path());
    let flynn_home = home.join(".local/share/flynn");
    std::fs::create_dir_all(&flynn_home).unwrap();
    let sandbox = sandboxed(SandboxMode::Landlock, false, &home)
        .with_paths(&SandboxPaths::flynn(&flynn_home, None));
    let error = sandbox.spawn("true", &home, &home).await.unwrap_err();
    assert!(error.is_exposed(), "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "tools.workspace is {}, which contains {}, Flynn's own files (the gateway token, \
             sessions, credentials), so commands do not run: Landlock cannot hide a path inside \
             a directory it opens; set tools.workspace to a directory that does not contain it, \
             or use tools.sandbox.mode: bubblewrap (which hides it)",
            home.display(),
            flynn_home.display()
        )
    );
    // What the daemon logs when it starts.
    assert_eq!(
        sandbox.startup_warning().await,
        Some(format!(
            "shell.exec and process.* cannot run commands: {error}"
        ))
    );
    let report = sandbox.report().await;
    assert_eq!(report.active, Err(error));
    assert_eq!(report.strength(), Strength::Unusable);
}

#[tokio::test]
async fn common_commands_still_work_under_landlock() {
    if !landlock_runs().await {
        return;
    }
    needs("python3");
    needs("git");
    let workspace = scratch();
    let sandbox = sandboxed(SandboxMode::Landlock, false, workspace.path());
    let ran = run(
        &sandbox,
        "ls; echo hi > f; cat f; python3 -c 'print(1 + 1)'; git --version >/dev/null && echo git; \
         /usr/bin/env >/dev/null && echo env; cd ~ && pwd",
        workspace.path(),
    )
    .await;
    assert_eq!(
        ran,
        Ran {
            stdout: format!(
                "hi\n2\ngit\nenv\n{}\n",
                canonical(workspace.path()).display()
            ),
            stderr: String::new(),
            code: Some(0),
        }
    );
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
    assert_eq!(
        sandbox.startup_warning().await,
        Some(format!(
            "shell.exec and process.* cannot run commands: {error}"
        ))
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
    // Only finding nothing at all is worth a warning.
    assert_eq!(
        auto.startup_warning().await.is_some(),
        report.active == Ok(Backend::None)
    );
    assert_eq!(report.warning(), auto.startup_warning().await);
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
async fn docker_gets_only_the_basic_variables_and_passes_only_tools_env() {
    let host = Host::new();
    let dir = scratch();
    let (args, env) = (dir.path().join("args"), dir.path().join("env"));
    let docker = fake_program(
        dir.path(),
        "docker",
        &format!(
            "if [ \"$1\" = info ]; then echo 27.1.0; exit 0; fi\n\
             printf '%s\\n' \"$@\" > {args}\n\
             env > {env}",
            args = args.display(),
            env = env.display()
        ),
    );
    let mut vars = host.env.clone();
    vars.push(("FLYNN_TEST_PASSED".into(), "passed on purpose".into()));
    vars.push(("DOCKER_HOST".into(), "unix:///run/docker.sock".into()));
    let sandbox = sandboxed(SandboxMode::Docker, false, host.workspace())
        .with_programs(Programs {
            docker,
            ..Programs::default()
        })
        .with_env(vec![
            "FLYNN_TEST_PASSED".to_owned(),
            "NOT_SET_ANYWHERE".to_owned(),
        ])
        .with_host_env(vars);
    let ran = run(&sandbox, "true", host.workspace()).await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let recorded = std::fs::read_to_string(&args).unwrap();
    let recorded: Vec<&str> = recorded.lines().collect();
    let ws = canonical(host.workspace()).display().to_string();
    let mounts = recorded.iter().position(|a| *a == "-v").unwrap();
    assert_eq!(
        recorded[mounts..],
        [
            "-v",
            &format!("{ws}:{ws}"),
            "-e",
            "FLYNN_TEST_PASSED",
            "-w",
            &ws,
            "debian:stable-slim",
            "sh",
            "-c",
            "true",
        ]
    );
    // The client itself: the basic variables, what it needs to find the
    // engine, and the names it passes on; no token, no key, no socket.
    let client = std::fs::read_to_string(&env).unwrap();
    for secret in &host.secrets {
        assert!(!client.contains(secret.as_str()), "{client}");
    }
    assert_eq!(
        env_names(&client),
        ["DOCKER_HOST", "FLYNN_TEST_PASSED", "HOME", "LANG", "PATH"]
    );
}

#[tokio::test]
async fn the_report_names_the_active_sandbox() {
    let workspace = scratch();
    let sandbox =
        sandboxed(SandboxMode::Auto, false, workspace.path()).with_env(vec!["GOPATH".to_owned()]);
    let report = sandbox.report().await;
    println!("{report}");
    let lines: Vec<String> = report.to_string().lines().map(str::to_owned).collect();
    let start = lines.iter().position(|l| l == "backends:").unwrap() + 1;
    let backends: Vec<&str> = lines[start..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(backends, ["bubblewrap", "docker", "landlock", "none"]);
    if bwrap_runs().await {
        assert_eq!(report.active, Ok(Backend::Bubblewrap));
        assert_eq!(report.strength(), Strength::Isolated);
        let system: Vec<String> = SYSTEM_DIRS
            .iter()
            .filter(|dir| {
                std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && !m.is_symlink())
            })
            .map(|dir| dir.to_string())
            .collect();
        let links: Vec<String> = SYSTEM_DIRS
            .iter()
            .filter_map(|dir| {
                let target = std::fs::read_link(dir).ok()?;
                Some(format!("{dir} -> {}", target.display()))
            })
            .collect();
        let mut readable = format!("readable: {} (system, read-only); ", system.join(", "));
        if !links.is_empty() {
            readable.push_str(&format!("{} (symlinks as on the host); ", links.join(", ")));
        }
        readable.push_str(
            "the writable directories; nothing else of the host ($HOME, FLYNN_HOME, /run, /var \
             are not there)",
        );
        let mut expected = vec![
            "sandbox: bubblewrap (tools.sandbox.mode: auto)".to_owned(),
            "network: isolated (a network namespace of its own, loopback only)".to_owned(),
            readable,
            format!(
                "writable: {}, /tmp (private to each command)",
                canonical(workspace.path()).display()
            ),
        ];
        if Path::new("/etc/flynn").is_dir() {
            expected.push("hidden: /etc/flynn (Flynn's own; commands cannot read them)".to_owned());
        }
        expected.push(
            "environment: cleared: only basic variables (PATH, LANG, TERM, TZ...) pass, HOME and \
             TMPDIR are /tmp; tools.env adds GOPATH"
                .to_owned(),
        );
        expected.push("backends:".to_owned());
        assert_eq!(lines[..start], expected);
        assert!(
            lines[start].starts_with("  bubblewrap  active: "),
            "{report}"
        );
        assert!(report.network_isolated);
    }
}
