//! Flynn under faults of its surroundings, each against the real daemon
//! (`flynn start`, the same code as `flynn-daemon`): a disk that fills up
//! in the middle of a turn, a database on a file system that is read-only,
//! a provider that stops sending in the middle of an answer, and a
//! Telegram connection cut every second.
//!
//! A full disk and a read-only file system are real: the daemon runs in a
//! user and mount namespace of its own (`unshare --user --map-root-user
//! --mount`, no root needed) whose small tmpfs holds its files. Without
//! unprivileged user namespaces those tests fail and say what to enable.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::setup::{TestConfig, wait_until};
use crate::{Env, stderr, stdout};

/// What to do when the namespaces are missing.
const ENABLE: &str = "the fault tests run the daemon in a user and mount namespace of its own (no root needed): install util-linux (unshare, nsenter) and allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 on Debian, kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04, user.max_user_namespaces above 0; in a container, run it with --privileged or a seccomp profile that allows unshare)";

/// A user and mount namespace, kept alive by a sleeping process, with a
/// small tmpfs mounted on each directory asked for. Only processes
/// started through [`Sandbox::wrap`] see the mounts; the test reaches
/// their files through `/proc/<pid>/root`.
struct Sandbox {
    holder: Child,
}

impl Sandbox {
    /// Mounts a tmpfs of `size` (`mount -o size=`, such as `8m`) on each
    /// directory, creating it.
    fn new(mounts: &[(&Path, &str)]) -> Sandbox {
        let mut command = Command::new("unshare");
        command.args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            "while [ $# -gt 0 ]; do mount -t tmpfs -o \"size=$2,mode=0700\" tmpfs \"$1\" || exit 1; shift 2; done; echo ready; exec sleep 3600",
            "sh",
        ]);
        for (dir, size) in mounts {
            std::fs::create_dir_all(dir).unwrap();
            command.arg(dir).arg(size);
        }
        let mut holder = match command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => panic!("cannot run unshare: {e}; {ENABLE}"),
        };
        let mut line = String::new();
        let read = BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line);
        if read.is_err() || line.trim() != "ready" {
            let _ = holder.kill();
            let output = holder.wait_with_output().unwrap();
            panic!(
                "cannot mount a tmpfs in a user namespace ({}): {ENABLE}",
                stderr(&output).trim()
            );
        }
        Sandbox { holder }
    }

    /// `command` run inside the namespace (through `nsenter`), with the
    /// same arguments, environment and working directory.
    fn wrap(&self, command: &Command) -> Command {
        let mut wrapped = Command::new("nsenter");
        wrapped
            .arg("--preserve-credentials")
            .args(["--user", "--mount", "--target"])
            .arg(self.holder.id().to_string());
        if let Some(dir) = command.get_current_dir() {
            wrapped.arg(format!("--wd={}", dir.display()));
        }
        wrapped
            .arg("--")
            .arg(command.get_program())
            .args(command.get_args())
            .env_clear();
        for (name, value) in command.get_envs() {
            if let Some(value) = value {
                wrapped.env(name, value);
            }
        }
        wrapped.stdin(Stdio::null());
        wrapped
    }

    /// Runs `script` with `sh` inside the namespace; it must succeed.
    fn sh(&self, script: &str) {
        let output = self
            .wrap(Command::new("sh").args(["-c", script]))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "`{script}` failed in the namespace: {}; {ENABLE}",
            stderr(&output)
        );
    }

    /// Where the test reaches `path` as the namespace sees it.
    fn outside(&self, path: &Path) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{}", self.holder.id(), path.display()))
    }

    /// Writes zeros to `file` (a path inside the namespace) until its file
    /// system is full.
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    fn fill(&self, file: &Path) {
        let mut out = std::fs::File::create(self.outside(file)).unwrap();
        let chunk = vec![0u8; 1 << 16];
        loop {
            match out.write_all(&chunk).and_then(|()| out.flush()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => return, // ENOSPC
                Err(e) => panic!("filling {}: {e}", file.display()),
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The CLI `args` for `env`, run outside the sandbox with the token of the
/// daemon whose FLYNN_HOME is in it.
fn run(env: &Env, token: &str, args: &[&str]) -> std::process::Output {
    env.command(args)
        .env("FLYNN_GATEWAY_TOKEN", token)
        .output()
        .unwrap()
}

/// The gateway token the daemon in `sandbox` wrote to `home`.
fn token(sandbox: &Sandbox, home: &Path) -> String {
    std::fs::read_to_string(sandbox.outside(&home.join("gateway.token")))
        .unwrap()
        .trim()
        .to_owned()
}

/// What `flynn start` for `env` inside `sandbox` says when it refuses to
/// start; it must exit within 30 s, and not with success.
fn refused_start(sandbox: &Sandbox, env: &Env) -> String {
    let log = env.path().join("refused.log");
    let mut child = sandbox
        .wrap(&env.command(&["start", "--bind", "127.0.0.1:0"]))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the daemon did not refuse to start:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{said}");
    said
}

/// `flynn start` for `env`, inside `sandbox`.
fn start_in(sandbox: &Sandbox, env: &Env) -> Daemon {
    Daemon::spawn(sandbox.wrap(&env.command(&["start", "--bind", "127.0.0.1:0"])))
}

/// The stored messages of `session` as `role: text` lines, through the
/// daemon (`token`: its gateway token, when the CLI cannot read it).
fn history(env: &Env, token: &str, url: &str, session: &str) -> Vec<String> {
    let output = run(
        env,
        token,
        &["sessions", "show", "--json", "--gateway", url, session],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let shown: Value = serde_json::from_str(&stdout(&output)).unwrap();
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let block = &m["content"][0];
            let text = block["text"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| block["type"].as_str().unwrap_or_default().to_owned());
            format!("{}: {text}", m["role"].as_str().unwrap_or_default())
        })
        .collect()
}

/// `PRAGMA quick_check` of the database at `path` in `sandbox`, which no
/// daemon has open any more: the file and its WAL are copied out (SQLite
/// resolves `/proc/<pid>/root` to this namespace's root), then checked.
async fn quick_check(sandbox: &Sandbox, path: &Path) -> Vec<String> {
    use sqlx::ConnectOptions;
    let copy = tempfile::tempdir().unwrap();
    let file = copy.path().join("sessions.db");
    std::fs::copy(sandbox.outside(path), &file).unwrap();
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    if sandbox.outside(&wal).exists() {
        std::fs::copy(sandbox.outside(&wal), copy.path().join("sessions.db-wal")).unwrap();
    }
    let mut connection = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .connect()
        .await
        .unwrap();
    sqlx::query_scalar("PRAGMA quick_check")
        .fetch_all(&mut connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_disk_that_fills_mid_turn_fails_the_turn_with_the_reason_and_the_session_carries_on() {
    let fake = FakeOpenAi::start().await;
    let env = Env::new().with_config(&TestConfig::new(&fake));
    let home = env.path().join("home");
    let sandbox = Sandbox::new(&[(&home, "24m")]);
    let mut daemon = start_in(&sandbox, &env);
    let token = token(&sandbox, &home);

    // The turn's own tool fills the disk: its result, and what follows,
    // have no room.
    let filler = home.join("workspace/filler");
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({ "command": "dd if=/dev/zero of=filler bs=1M count=64 2>/dev/null; echo done" }),
    )]));
    let failed = run(
        &env,
        &token,
        &[
            "send",
            "--yes",
            "--gateway",
            &daemon.url,
            "--session",
            "cli:disk",
            "fill the disk",
        ],
    );
    assert_ne!(failed.status.code(), Some(0), "{}", stdout(&failed));
    let said = stderr(&failed);
    assert!(
        said.contains("error: the session database cannot grow: the disk is full"),
        "the client is not told the disk is full: {said}\n{}",
        daemon.log()
    );
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());

    // Room again: how the turn ended is recorded after all (an open turn
    // would hold up the shutdown), the accepted message is kept and the
    // session goes on.
    std::fs::remove_file(sandbox.outside(&filler)).unwrap();
    wait_until(
        "the failed turn recorded",
        Duration::from_secs(30),
        &daemon,
        || {
            daemon
                .log()
                .contains("recorded how the turn ended after all")
        },
    );
    fake.push(Reply::Text("Still here.".into()));
    let answered = run(
        &env,
        &token,
        &[
            "send",
            "--gateway",
            &daemon.url,
            "--session",
            "cli:disk",
            "are you there?",
        ],
    );
    assert_eq!(
        (answered.status.code(), stdout(&answered)),
        (Some(0), "Still here.\n".to_owned()),
        "{}\n{}",
        stderr(&answered),
        daemon.log()
    );
    let stored = history(&env, &token, &daemon.url, "cli:disk");
    assert_eq!(
        stored.first().map(String::as_str),
        Some("user: fill the disk")
    );
    assert!(
        stored.ends_with(&[
            "user: are you there?".into(),
            "assistant: Still here.".into()
        ]),
        "{stored:#?}"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
    let status = daemon.stop(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert_eq!(
        quick_check(&sandbox, &home.join("sessions.db")).await,
        vec!["ok".to_owned()]
    );
}

#[tokio::test]
async fn a_daemon_started_on_a_read_only_database_names_the_file_and_serves_once_it_is_writable() {
    let fake = FakeOpenAi::start().await;
    let data = tempfile::tempdir().unwrap();
    let db_dir = data.path().join("db");
    let database = db_dir.join("sessions.db");
    let env = Env::new().with_config(
        &TestConfig::new(&fake).section(&format!("sessions:\n  database: {}", database.display())),
    );
    let home = env.path().join("home");
    let sandbox = Sandbox::new(&[(&home, "16m"), (&db_dir, "16m")]);
    let mut daemon = start_in(&sandbox, &env);
    let token = token(&sandbox, &home);
    fake.push(Reply::Text("Noted.".into()));
    let answered = run(
        &env,
        &token,
        &["send", "--gateway", &daemon.url, "remember this"],
    );
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    assert!(daemon.stop(Duration::from_secs(30)).success());

    // The file system holding the database turns read-only.
    sandbox.sh(&format!("mount -o remount,bind,ro {}", db_dir.display()));
    let said = refused_start(&sandbox, &env);
    assert!(
        said.contains(&database.display().to_string()) && said.contains("read-only"),
        "the refusal does not name the file and the problem: {said}"
    );

    // Writable again: it serves, with the history intact.
    sandbox.sh(&format!("mount -o remount,bind,rw {}", db_dir.display()));
    let mut daemon = start_in(&sandbox, &env);
    fake.push(Reply::Text("Still here.".into()));
    let answered = run(
        &env,
        &token,
        &["send", "--gateway", &daemon.url, "are you there?"],
    );
    assert_eq!(
        (answered.status.code(), stdout(&answered)),
        (Some(0), "Still here.\n".to_owned()),
        "{}",
        stderr(&answered)
    );
    assert_eq!(
        history(&env, &token, &daemon.url, "cli:default"),
        [
            "user: remember this",
            "assistant: Noted.",
            "user: are you there?",
            "assistant: Still here."
        ]
    );
    assert!(daemon.stop(Duration::from_secs(30)).success());
    assert_eq!(
        quick_check(&sandbox, &database).await,
        vec!["ok".to_owned()]
    );
}

/// A first piece of an answer, then nothing, the connection held open.
const HANGS: &str = "data: {\"id\":\"chatcmpl-h\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Let me think\"},\"finish_reason\":null}]}\n\n";

#[tokio::test]
async fn a_provider_that_hangs_mid_stream_fails_the_turn_at_its_read_timeout_and_the_next_turn_works()
 {
    let fake = FakeOpenAi::start().await;
    let env = Env::new().with_config(&TestConfig::new(&fake).provider("read_timeout_secs: 2"));
    let daemon = Daemon::start(&env);
    let token = std::fs::read_to_string(env.path().join("home/gateway.token")).unwrap();
    let token = token.trim();

    fake.push(Reply::Stall(HANGS.into()));
    let started = Instant::now();
    let failed = env.run(&[
        "send",
        "--gateway",
        &daemon.url,
        "--session",
        "cli:hang",
        "think hard",
    ]);
    let took = started.elapsed();
    assert_ne!(failed.status.code(), Some(0), "{}", stdout(&failed));
    let said = stderr(&failed);
    assert!(
        said.contains("openai: no response within 2s"),
        "the failure does not say the provider went silent: {said}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "failed after {took:?}, not at the 2 s read timeout"
    );
    assert_eq!(fake.requests().len(), 1, "the silent call was not retried");

    // The call cut short is counted, as partial.
    let usage = env.run(&["usage", "--json", "--gateway", &daemon.url]);
    assert_eq!(usage.status.code(), Some(0), "{}", stderr(&usage));
    let usage: Value = serde_json::from_str(&stdout(&usage)).unwrap();
    assert_eq!(usage["tiers"]["default"]["calls"], 1, "{usage:#}");

    fake.push(Reply::Text("Here is my answer.".into()));
    let answered = env.run(&[
        "send",
        "--gateway",
        &daemon.url,
        "--session",
        "cli:hang",
        "try again",
    ]);
    assert_eq!(
        (answered.status.code(), stdout(&answered)),
        (Some(0), "Here is my answer.\n".to_owned()),
        "{}",
        stderr(&answered)
    );
    let stored = history(&env, token, &daemon.url, "cli:hang");
    assert_eq!(stored.first().map(String::as_str), Some("user: think hard"));
    assert!(
        stored.ends_with(&[
            "user: try again".into(),
            "assistant: Here is my answer.".into()
        ]),
        "{stored:#?}"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[cfg(feature = "telegram")]
mod telegram {
    use super::*;
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    const OWNER: i64 = 4242;

    fn telegram_config(fake: &FakeOpenAi, telegram: &FakeTelegram) -> TestConfig {
        TestConfig::new(fake).telegram(
            telegram,
            &format!("owners: [\"{OWNER}\"]\nrate_limit: {{messages: 0}}"),
        )
    }

    /// `getUpdates` calls so far: while an update is pending each one is
    /// answered with it at once, so each is an ask for it.
    fn polls(telegram: &FakeTelegram) -> usize {
        telegram.calls("getUpdates").len()
    }

    #[tokio::test]
    async fn a_message_refused_while_the_disk_is_full_is_asked_for_with_backoff_warned_once_and_answered_after()
     {
        let fake = FakeOpenAi::start().await;
        let telegram = FakeTelegram::start().await;
        let env = Env::new().with_config(&telegram_config(&fake, &telegram));
        let home = env.path().join("home");
        let sandbox = Sandbox::new(&[(&home, "16m")]);
        let mut daemon = start_in(&sandbox, &env);
        wait_until(
            "the first long poll",
            Duration::from_secs(30),
            &daemon,
            || !telegram.calls("getUpdates").is_empty(),
        );

        let filler = home.join("filler");
        sandbox.fill(&filler);
        telegram.push(Incoming::private(&TgUser::new(OWNER, "Owner"), "hello?"));
        // Telegram hands the update out again and again while the daemon
        // cannot store it: the first refusal, then five more asks (2.5 s
        // at a fixed 500 ms; 15.5 s doubling from there).
        wait_until(
            "the first refusal",
            Duration::from_secs(30),
            &daemon,
            || daemon.log().contains("inbound not accepted"),
        );
        let refused = Instant::now();
        let asks = polls(&telegram);
        wait_until("five more asks", Duration::from_secs(120), &daemon, || {
            polls(&telegram) >= asks + 5
        });
        let took = refused.elapsed();
        let log = daemon.log();
        assert!(
            took >= Duration::from_secs(10),
            "five asks in {took:?}: the adapter does not back off"
        );
        let warnings = log.matches("inbound not accepted").count();
        assert_eq!(warnings, 1, "the refusal is not said once:\n{log}");
        assert!(log.contains("disk is full"), "{log}");

        // Room again: the message is taken and answered, once.
        fake.push(Reply::Text("Hello again.".into()));
        std::fs::remove_file(sandbox.outside(&filler)).unwrap();
        assert!(
            telegram
                .wait(Duration::from_secs(60), |t| t
                    .sent()
                    .iter()
                    .any(|m| m.plain == "Hello again."))
                .await,
            "never answered:\n{}",
            daemon.log()
        );
        assert!(
            daemon.log().contains("accepted again"),
            "the recovery is not said:\n{}",
            daemon.log()
        );
        let status = daemon.stop(Duration::from_secs(30));
        assert!(status.success(), "{status:?}\n{}", daemon.log());
        let answers = telegram
            .sent()
            .iter()
            .filter(|m| m.plain == "Hello again.")
            .count();
        assert_eq!(answers, 1);
        assert_eq!(telegram.violations(), Vec::<String>::new());
        assert_eq!(
            quick_check(&sandbox, &home.join("sessions.db")).await,
            vec!["ok".to_owned()]
        );
    }

    #[tokio::test]
    async fn an_adapter_whose_long_polls_are_cut_every_second_answers_every_message_once() {
        const MESSAGES: usize = 8;
        let fake = FakeOpenAi::start().await;
        for n in 0..MESSAGES {
            fake.push(Reply::Text(format!("answer {n}")));
        }
        let telegram = FakeTelegram::start().await;
        telegram.cut_polls_after(Some(Duration::from_secs(1)));
        let env = Env::new().with_config(&telegram_config(&fake, &telegram));
        let daemon = Daemon::start(&env);
        let owner = TgUser::new(OWNER, "Owner");
        for n in 0..MESSAGES {
            telegram.push(Incoming::private(&owner, &format!("message {n}")));
            // Messages keep coming while polls are cut: one each time a
            // poll is cut.
            let cut = telegram.cut_polls();
            assert!(
                telegram
                    .wait(Duration::from_secs(90), |t| t.cut_polls() > cut)
                    .await,
                "no poll was cut:\n{}",
                daemon.log()
            );
        }
        let answered = |t: &FakeTelegram| {
            t.sent()
                .iter()
                .filter(|m| m.plain.starts_with("answer "))
                .count()
                >= MESSAGES
        };
        assert!(
            telegram.wait(Duration::from_secs(120), answered).await,
            "not every message was answered: {:#?}\n{}",
            telegram.sent(),
            daemon.log()
        );
        // Quiet for a while, polls cut one after the other: the adapter
        // gives up its connection and the registry reconnects it after a
        // backoff; a message then is answered too.
        wait_until("a reconnect", Duration::from_secs(60), &daemon, || {
            daemon.log().contains("channel disconnected")
        });
        fake.push(Reply::Text(format!("answer {MESSAGES}")));
        telegram.push(Incoming::private(&owner, "one more"));
        assert!(
            telegram
                .wait(Duration::from_secs(120), |t| t
                    .sent()
                    .iter()
                    .any(|m| m.plain == format!("answer {MESSAGES}")))
                .await,
            "the message after the reconnect was not answered:\n{}",
            daemon.log()
        );
        let mut texts: Vec<String> = telegram.sent().into_iter().map(|m| m.plain).collect();
        texts.sort();
        let mut expected: Vec<String> = (0..=MESSAGES).map(|n| format!("answer {n}")).collect();
        expected.sort();
        assert_eq!(texts, expected, "each message answered exactly once");
        // The gateway kept serving throughout.
        fake.push(Reply::Text("Gateway here.".into()));
        let output = env.run(&[
            "send",
            "--gateway",
            &daemon.url,
            "--session",
            "cli:gw",
            "hi",
        ]);
        assert_eq!(
            (output.status.code(), stdout(&output)),
            (Some(0), "Gateway here.\n".to_owned()),
            "{}",
            stderr(&output)
        );
        assert_eq!(telegram.violations(), Vec::<String>::new());
        assert_eq!(fake.violations(), Vec::<String>::new());
    }
}
