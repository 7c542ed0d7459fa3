//! `flynn backup` and `flynn restore`, and the integrity check.

use std::process::Stdio;
use std::time::{Duration, Instant};

use flynn_testkit::{FakeOpenAi, Reply};

use crate::daemon::Daemon;
use crate::{Env, stderr, stdout};

/// Waits until the fake has received `count` requests.
fn wait_for_requests(fake: &FakeOpenAi, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.requests().len() < count {
        assert!(Instant::now() < deadline, "the model was never called");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_taken_while_a_turn_is_written_restores_with_its_messages() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hi there.".into()));
    fake.push(Reply::Stall(
        "data: {\"choices\":[{\"delta\":{\"content\":\"Once\"}}]}\n\n".into(),
    ));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    std::fs::create_dir_all(env.path().join("home/memory")).unwrap();
    std::fs::write(
        env.path().join("home/memory/user.md"),
        "# User\nLikes tea.\n",
    )
    .unwrap();
    let sent = env.run(&["send", "--session", "cli:notes", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));

    // The daemon runs, and another turn is half-way through its answer.
    let daemon = Daemon::start(&env);
    let mut stalled = env
        .command(&["send", "--session", "cli:story", "tell me a story"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_requests(&fake, 2);

    let archive = env.path().join("flynn.tar.gz");
    let backup = env.run(&["backup", archive.to_str().unwrap()]);
    assert_eq!(backup.status.code(), Some(0), "{}", stderr(&backup));
    assert!(
        stdout(&backup).starts_with("backed up "),
        "{}",
        stdout(&backup)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&archive).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // Not while the daemon holds the home.
    let refused = env.run(&["restore", archive.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("a daemon is running on")
            && stderr(&refused).contains("stop it first"),
        "{}",
        stderr(&refused)
    );
    drop(daemon);
    let _ = stalled.kill();
    let _ = stalled.wait();

    // Things change after the backup...
    let reset = env.run(&["sessions", "reset", "cli:notes"]);
    assert_eq!(reset.status.code(), Some(0), "{}", stderr(&reset));
    std::fs::write(env.path().join("home/memory/user.md"), "gone\n").unwrap();

    // ...and the restore brings the backup's state back.
    let restored = env.run(&["restore", archive.to_str().unwrap()]);
    assert_eq!(restored.status.code(), Some(0), "{}", stderr(&restored));
    let shown = env.run(&["sessions", "show", "cli:notes"]);
    assert_eq!(stdout(&shown), "user: hello\nassistant: Hi there.\n");
    let story = env.run(&["sessions", "show", "cli:story"]);
    assert_eq!(stdout(&story), "user: tell me a story\n");
    assert_eq!(
        std::fs::read_to_string(env.path().join("home/memory/user.md")).unwrap(),
        "# User\nLikes tea.\n"
    );
    // What the restore replaced is kept aside.
    let aside: Vec<_> = std::fs::read_dir(env.path().join("home"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("before-restore-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let kept = env.path().join("home").join(&aside[0]);
    assert!(kept.join("sessions.db").is_file());
    assert_eq!(
        std::fs::read_to_string(kept.join("memory/user.md")).unwrap(),
        "gone\n"
    );
    let doctor = env.run(&["doctor"]);
    assert!(
        stdout(&doctor).contains("session(s), integrity check passed"),
        "{}",
        stdout(&doctor)
    );
}

#[test]
fn a_damaged_database_fails_doctor_and_stops_the_daemon_with_the_fix() {
    let env = Env::new()
        .var("OPENAI_BASE_URL", "http://127.0.0.1:9")
        .var("OPENAI_API_KEY", "sk-x");
    let home = env.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let db = home.join("sessions.db");
    make_damaged_database(&db);

    let doctor = env.run(&["doctor"]);
    let out = stdout(&doctor);
    assert!(
        out.contains("failed its integrity check") && out.contains("flynn restore <archive>"),
        "{out}"
    );

    let started = env.run(&["start", "--bind", "127.0.0.1:0"]);
    assert_ne!(started.status.code(), Some(0));
    let err = stderr(&started);
    assert!(
        err.contains("failed its integrity check")
            && err.contains("flynn restore <archive>")
            && err.contains(".recover"),
        "{err}"
    );
}

/// A database whose index on messages lost its entries: `quick_check`
/// reports the rows missing from it, while the file still opens.
fn make_damaged_database(path: &std::path::Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use flynn_core::Conversations as _;
        let store = flynn_core::sessions::SqliteStore::open(path).await.unwrap();
        let key: flynn_core::SessionKey = "cli:notes".parse().unwrap();
        for i in 0..20 {
            store
                .append(&key, &[flynn_core::Message::user(format!("message {i}"))])
                .await
                .unwrap();
        }
        store.close().await;
    });
    crate::backup::zero_index_page(path);
}

/// Overwrites the first page of an index on `messages` with an empty leaf
/// index page.
pub fn zero_index_page(path: &std::path::Path) {
    let bytes = std::fs::read(path).unwrap();
    let page_size = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    let mut bytes = bytes;
    let root = index_root(path);
    let start = (root - 1) * page_size;
    bytes[start..start + page_size].fill(0);
    bytes[start] = 0x0a;
    std::fs::write(path, bytes).unwrap();
}

fn index_root(path: &std::path::Path) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use sqlx::ConnectOptions;
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .connect()
            .await
            .unwrap();
        let root: i64 = sqlx::query_scalar(
            "SELECT rootpage FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'messages' ORDER BY name LIMIT 1",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        usize::try_from(root).unwrap()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_prunes_sessions_and_attachments_idle_past_the_retention() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Old answer.".into()));
    fake.push(Reply::Text("New answer.".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    for (session, text) in [("cli:old", "long ago"), ("cli:new", "today")] {
        let sent = env.run(&["send", "--session", session, text]);
        assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    }
    // cli:old was last active ten days ago; an attachment as old.
    let db = env.path().join("home/sessions.db");
    {
        use sqlx::ConnectOptions;
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&db)
            .connect()
            .await
            .unwrap();
        sqlx::query(
            "UPDATE sessions SET updated_at = updated_at - 864000000 WHERE key = 'cli:old'",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let inbox = env.path().join("home/workspace/inbox/telegram");
    std::fs::create_dir_all(&inbox).unwrap();
    let ten_days_ago = std::time::SystemTime::now() - Duration::from_secs(10 * 24 * 3600);
    for (name, modified) in [
        ("1-old.jpg", ten_days_ago),
        ("2-new.jpg", std::time::SystemTime::now()),
    ] {
        let file = std::fs::File::create(inbox.join(name)).unwrap();
        file.set_modified(modified).unwrap();
    }
    std::fs::create_dir_all(env.path().join("config/flynn")).unwrap();
    std::fs::write(
        env.path().join("config/flynn/config.yaml"),
        "sessions:\n  retention_days: 7\n",
    )
    .unwrap();

    let _daemon = Daemon::start(&env);
    let inbox_files = || -> Vec<String> {
        std::fs::read_dir(&inbox)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = stdout(&env.run(&["sessions", "list", "--json"]));
        if !listed.contains("cli:old") && inbox_files().len() == 1 {
            assert!(listed.contains("cli:new"), "{listed}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cli:old was never pruned: {listed} {:?}",
            inbox_files()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(inbox_files(), ["2-new.jpg"]);
}
