//! `flynn store copy`, as a user runs it.

use flynn_testkit::{FakeOpenAi, Reply};

use crate::{Env, stderr, stdout};

#[tokio::test(flavor = "multi_thread")]
async fn a_store_is_copied_into_an_empty_one_and_a_full_one_is_refused() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hi there.".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let sent = env.run(&["send", "--session", "cli:notes", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));

    let from = env.path().join("home/sessions.db");
    let to = env.path().join("moved/sessions.db");
    let to_url = format!("sqlite://{}", to.display());
    let copied = env.run(&["store", "copy", from.to_str().unwrap(), &to_url]);
    assert_eq!(copied.status.code(), Some(0), "{}", stderr(&copied));
    assert_eq!(
        stdout(&copied),
        format!(
            "copied 1 sessions, 2 messages, 1 turns, 1 usage records from {} to {}\n",
            from.display(),
            to.display()
        )
    );
    // Into PostgreSQL: memory is not part of the copy, and the command
    // says how to move it.
    let database = flynn_testkit::postgres::TestDatabase::create().await;
    let copied = env.run(&["store", "copy", from.to_str().unwrap(), database.url()]);
    assert_eq!(copied.status.code(), Some(0), "{}", stderr(&copied));
    assert!(
        stdout(&copied).ends_with(
            "memory: with the sessions in PostgreSQL, memory is kept there too; once sessions.url points at it, move the memory files in with `flynn memory import <memory dir>`\n"
        ),
        "{}",
        stdout(&copied)
    );
    // The copy is a store Flynn reads: the conversation is there.
    let listed = env
        .command(&["sessions", "show", "cli:notes"])
        .env("FLYNN_HOME", env.path().join("moved"))
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    assert!(stdout(&listed).contains("Hi there."), "{}", stdout(&listed));

    let again = env.run(&["store", "copy", from.to_str().unwrap(), &to_url]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again),
        format!(
            "error: session database error: the session store {} is not empty (1 sessions, 2 messages, 1 turns, 1 usage records): copy into an empty database (a new file, or a new PostgreSQL database)\n",
            to.display()
        )
    );
    let wrong = env.run(&["store", "copy", "mysql://db/flynn", &to_url]);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(stderr(&wrong).starts_with("error: FROM: sessions.url 'mysql://db/flynn'"));
}

#[tokio::test(flavor = "multi_thread")]
async fn daemons_on_one_postgresql_database_share_its_sessions_and_commands_run_beside_them() {
    let database = flynn_testkit::postgres::TestDatabase::create().await;
    let fake = FakeOpenAi::start().await;
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let config = env.path().join("flynn.yaml");
    std::fs::write(&config, format!("sessions:\n  url: {}\n", database.url())).unwrap();
    let config = config.to_str().unwrap().to_owned();

    let mut first = crate::daemon::Daemon::start_with(&env, &["--config", &config]);
    // A command beside the daemon stores its turn in the same database.
    fake.push(Reply::Text("Stored in PostgreSQL.".into()));
    let sent = env.run(&["send", "--config", &config, "--session", "cli:pg", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    let listed = env.run(&["sessions", "list", "--config", &config]);
    assert!(stdout(&listed).contains("cli:pg"), "{}", stdout(&listed));

    // A session the daemon runs: a command's message to it is run there,
    // in its turn, and the command prints the answer.
    fake.push(Reply::Text("The daemon answered.".into()));
    let held = env.run(&[
        "send",
        "--gateway",
        &first.url,
        "--session",
        "cli:held",
        "one",
    ]);
    assert_eq!(held.status.code(), Some(0), "{}", stderr(&held));
    fake.push(Reply::Text("The daemon answered again.".into()));
    let beside = env.run(&["send", "--config", &config, "--session", "cli:held", "two"]);
    assert_eq!(beside.status.code(), Some(0), "{}", stderr(&beside));
    assert_eq!(stdout(&beside).trim(), "The daemon answered again.");
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(database.url()).await.unwrap();
        let owners: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT status, owner_node FROM turns WHERE session_key = 'cli:held' ORDER BY id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(owners.len(), 2, "{owners:?}");
        assert!(
            owners.iter().all(|(status, _)| status == "completed"),
            "{owners:?}"
        );
        assert_eq!(owners[0].1, owners[1].1, "one node ran both: {owners:?}");
        // The command left the cluster as it exited; the daemon stays.
        let nodes: Vec<(String, String)> = sqlx::query_as("SELECT id, kind FROM cluster_nodes")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        assert_eq!(nodes[0].1, "daemon");
        assert_eq!(Some(&nodes[0].0), owners[0].1.as_ref());
    }

    // Another daemon (its own home) joins the same database: a message
    // it takes for a session the first runs is run there.
    let other = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let mut second = crate::daemon::Daemon::start_with(&other, &["--config", &config]);
    fake.push(Reply::Text("Still the first daemon.".into()));
    let through_second = other.run(&[
        "send",
        "--gateway",
        &second.url,
        "--session",
        "cli:held",
        "three",
    ]);
    assert_eq!(
        through_second.status.code(),
        Some(0),
        "{}",
        stderr(&through_second)
    );
    assert_eq!(stdout(&through_second).trim(), "Still the first daemon.");
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(database.url()).await.unwrap();
        let owners: Vec<Option<String>> = sqlx::query_scalar(
            "SELECT owner_node FROM turns WHERE session_key = 'cli:held' ORDER BY id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(owners.len(), 3, "{owners:?}");
        assert!(owners.iter().all(|o| o == &owners[0]), "{owners:?}");
        let daemons: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM cluster_nodes WHERE kind = 'daemon'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(daemons, 2);
    }
    // `flynn doctor` on either names both nodes.
    let doctor = other.run(&["doctor", "--config", &config]);
    assert!(
        stdout(&doctor).contains("2 daemon node(s)"),
        "{}",
        stdout(&doctor)
    );

    assert!(first.stop(std::time::Duration::from_secs(20)).success());
    // The first gone, the second runs the session.
    fake.push(Reply::Text("Now the second daemon.".into()));
    let moved = other.run(&[
        "send",
        "--gateway",
        &second.url,
        "--session",
        "cli:held",
        "four",
    ]);
    assert_eq!(moved.status.code(), Some(0), "{}", stderr(&moved));
    assert_eq!(stdout(&moved).trim(), "Now the second daemon.");
    assert!(second.stop(std::time::Duration::from_secs(20)).success());
}
