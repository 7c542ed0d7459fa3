//! Three daemons on one PostgreSQL database: clients spread across them,
//! each session run by one node whichever node a message reaches, and one
//! daemon killed (`kill -9`) in the middle of a turn: no accepted message
//! lost, none answered twice, every session's turns in acceptance order.

use std::time::{Duration, Instant};

use flynn_testkit::postgres::TestDatabase;
use flynn_testkit::{FakeOpenAi, Reply};
use sqlx::Connection;

use crate::daemon::Daemon;
use crate::{Env, stderr, stdout};

const TOKEN: &str = "cluster-gateway-token-0123456789abcdef";

const STALLED: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Half\"}}]}\n\n";

fn node(fake: &FakeOpenAi, config: &str) -> (Env, Daemon) {
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x")
        .var("FLYNN_GATEWAY_TOKEN", TOKEN);
    let path = env.path().join("flynn.yaml");
    std::fs::write(&path, config).unwrap();
    let daemon = Daemon::start_with(&env, &["--config", path.to_str().unwrap()]);
    (env, daemon)
}

fn send(env: &Env, daemon: &Daemon, session: &str, text: &str) -> std::process::Output {
    env.run(&["send", "--gateway", &daemon.url, "--session", session, text])
}

#[tokio::test(flavor = "multi_thread")]
async fn three_daemons_share_the_sessions_and_a_killed_one_loses_nothing() {
    let database = TestDatabase::create().await;
    let fake = FakeOpenAi::start().await;
    let config = format!("sessions:\n  url: {}\n", database.url());
    let mut nodes: Vec<(Env, Daemon)> = (0..3).map(|_| node(&fake, &config)).collect();
    let sessions: Vec<String> = (0..6).map(|i| format!("cli:s{i}")).collect();

    // Each session starts on one node, then gets a message through the
    // next node: it is run where the session is, answered once.
    for round in 0..2 {
        for (i, session) in sessions.iter().enumerate() {
            let (env, daemon) = &nodes[(i + round) % 3];
            fake.push(Reply::Text(format!("answer {round}")));
            let sent = send(env, daemon, session, &format!("message {round}"));
            assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
            assert_eq!(stdout(&sent).trim(), format!("answer {round}"));
        }
    }

    // A session the first node runs; its next turn, sent through the
    // second node, stalls half-way through the answer.
    fake.push(Reply::Text("before".into()));
    let sent = send(&nodes[0].0, &nodes[0].1, "cli:victim", "first");
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    let asked = fake.requests().len();
    fake.push(Reply::Stall(STALLED.into()));
    let waiting = nodes[1]
        .0
        .command(&[
            "send",
            "--gateway",
            &nodes[1].1.url,
            "--session",
            "cli:victim",
            "long",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.requests().len() == asked {
        assert!(
            Instant::now() < deadline,
            "the stalled turn never reached the model"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let killed_at = Instant::now();
    nodes[0].1.signal("KILL");
    let _ = nodes[0].1.wait(Duration::from_secs(10));

    // The sender through the second node is told the turn was cut short,
    // once a surviving node has taken the session over.
    let mut waiting = waiting;
    let deadline = Instant::now() + Duration::from_secs(60);
    while waiting.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = waiting.kill();
            panic!("the sender through the second node was never told what became of its turn");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let told = waiting.wait_with_output().unwrap();
    let moved_after = killed_at.elapsed();
    assert_ne!(told.status.code(), Some(0), "{}", stdout(&told));
    assert!(stderr(&told).contains("interrupted"), "{}", stderr(&told));
    assert!(
        moved_after < Duration::from_secs(30),
        "the session moved after {moved_after:?}"
    );
    eprintln!("the killed node's session moved in {moved_after:?}");

    // And the session goes on, on the third node.
    fake.push(Reply::Text("after".into()));
    let sent = send(&nodes[2].0, &nodes[2].1, "cli:victim", "next");
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
    assert_eq!(stdout(&sent).trim(), "after");

    // What the database holds: every turn ended, in acceptance order, each
    // answered once (the model was asked once per turn run).
    let mut conn = sqlx::PgConnection::connect(database.url()).await.unwrap();
    let turns: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT id, session_key, status FROM turns ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(turns.len(), 12 + 3, "{turns:?}");
    let interrupted: Vec<&(i64, String, String)> =
        turns.iter().filter(|t| t.2 != "completed").collect();
    assert_eq!(interrupted.len(), 1, "{turns:?}");
    assert_eq!(interrupted[0].1, "cli:victim");
    assert_eq!(interrupted[0].2, "interrupted");
    assert_eq!(fake.requests().len(), 12 + 3, "one model call per turn run");
    for session in sessions
        .iter()
        .chain(std::iter::once(&"cli:victim".to_owned()))
    {
        assert_history_in_order(&mut conn, session).await;
    }
    let open: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM turns WHERE status IN ('pending', 'running')")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(open, 0);
    assert_eq!(fake.violations(), Vec::<String>::new());

    // Any node shows the cluster: the killed one silent, the others alive.
    // (The automation moves within 3 s of the node's death being seen.)
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        let status = cluster_status(&nodes[2].1.url).await;
        let moved = status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["alive"] == true && n["roles"] == serde_json::json!(["automation"]));
        if moved || Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let listed = status["nodes"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{status}");
    let alive: Vec<&serde_json::Value> = listed.iter().filter(|n| n["alive"] == true).collect();
    assert_eq!(alive.len(), 2, "{status}");
    let dead = listed.iter().find(|n| n["alive"] == false).unwrap();
    assert!(
        dead["id"]
            .as_str()
            .unwrap()
            .contains(&format!("/{}/", nodes[0].1.pid())),
        "{status}"
    );
    assert!(
        alive.iter().any(|n| n["id"] == status["this_node"]),
        "{status}"
    );
    assert!(
        alive
            .iter()
            .any(|n| n["roles"] == serde_json::json!(["automation"])),
        "{status}"
    );

    for (_, daemon) in nodes.iter_mut().skip(1) {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
}

/// A session's history in the database: its turns' messages in the order
/// the session accepted them (by turn id), each user message followed by
/// exactly one answer or note.
async fn assert_history_in_order(conn: &mut sqlx::PgConnection, session: &str) {
    let messages: Vec<(String, Option<i64>)> =
        sqlx::query_as("SELECT role, turn_id FROM messages WHERE session_key = $1 ORDER BY pos")
            .bind(session)
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    let users: Vec<i64> = messages
        .iter()
        .filter(|m| m.0 == "user")
        .filter_map(|m| m.1)
        .collect();
    let mut sorted = users.clone();
    sorted.sort_unstable();
    assert_eq!(users, sorted, "{session}: turns out of acceptance order");
    let roles: Vec<&str> = messages.iter().map(|m| m.0.as_str()).collect();
    for pair in roles.chunks(2) {
        assert_eq!(pair, ["user", "assistant"], "{session}: {roles:?}");
    }
}

/// Runs a query on the test database and returns one column of text.
#[cfg(feature = "telegram")]
async fn texts(url: &str, sql: &str) -> Vec<String> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(&mut conn)
        .await
        .unwrap()
}

/// `cluster.status` from the daemon at `url`.
async fn cluster_status(url: &str) -> serde_json::Value {
    rpc(url, "cluster.status").await
}

/// A method without parameters, called on the daemon at `url`.
async fn rpc(url: &str, method: &str) -> serde_json::Value {
    use jsonrpsee::core::client::ClientT;
    let mut headers = jsonrpsee::ws_client::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let client = jsonrpsee::ws_client::WsClientBuilder::default()
        .set_headers(headers)
        .build(format!("{}/rpc", url.replacen("http://", "ws://", 1)))
        .await
        .unwrap();
    client
        .request(method, jsonrpsee::core::params::ObjectParams::new())
        .await
        .unwrap()
}

#[cfg(feature = "telegram")]
#[tokio::test(flavor = "multi_thread")]
async fn a_chat_whose_turn_died_with_its_node_is_told_by_the_node_that_takes_over() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    use crate::setup::TestConfig;

    let database = TestDatabase::create().await;
    let model = FakeOpenAi::start().await;
    model.push(Reply::Stall(STALLED.into()));
    let telegram = FakeTelegram::start().await;
    let owner = TgUser::new(4242, "Owner");
    let config = TestConfig::new(&model)
        .telegram(&telegram, "allow_from: [\"4242\"]\nowners: [\"4242\"]")
        .section(&format!("sessions:\n  url: {}", database.url()));
    let mut nodes: Vec<Daemon> = (0..3)
        .map(|_| Daemon::start(&Env::new().with_config(&config)))
        .collect();
    let wait = |what: &str, limit: Duration, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; sent: {:#?}",
                telegram.sent()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // The node polling Telegram takes the message and runs its turn,
    // which stalls half-way; then that node dies.
    telegram.push(Incoming::private(&owner, "a long question"));
    wait("the model call", Duration::from_secs(20), &|| {
        !model.requests().is_empty()
    });
    let poller = texts(
        database.url(),
        "SELECT node FROM cluster_roles WHERE name = 'channel:telegram'",
    )
    .await;
    let index = nodes
        .iter()
        .position(|d| poller[0].contains(&format!("/{}/", d.pid())))
        .unwrap();
    let mut dead = nodes.remove(index);
    dead.signal("KILL");
    let _ = dead.wait(Duration::from_secs(10));

    // The node that takes the session over tells the chat.
    let told = |t: &FakeTelegram| {
        t.sent()
            .iter()
            .filter(|m| m.chat_id == 4242 && m.plain.contains("Interrupted"))
            .count()
    };
    wait("the interruption note", Duration::from_secs(40), &|| {
        told(&telegram) == 1
    });
    let note = telegram
        .sent()
        .into_iter()
        .find(|m| m.plain.contains("Interrupted"))
        .unwrap();
    assert!(note.plain.contains("a long question"), "{}", note.plain);
    // And the chat goes on.
    model.push(Reply::Text("ok".into()));
    telegram.push(Incoming::private(&owner, "still there?"));
    wait("the next answer", Duration::from_secs(30), &|| {
        telegram
            .sent()
            .iter()
            .any(|m| m.chat_id == 4242 && m.plain == "ok")
    });
    assert_eq!(told(&telegram), 1, "told once");
    for daemon in &mut nodes {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
}

/// Each node's state of `channel` (`channels.status`), sorted, once they
/// are `expected` (within 30 s).
#[cfg(all(
    feature = "telegram",
    feature = "discord",
    feature = "slack",
    feature = "whatsapp"
))]
async fn wait_for_states(urls: &[String], channel: &str, expected: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut states = Vec::new();
        for url in urls {
            let status = rpc(url, "channels.status").await;
            let state = status
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == channel)
                .map(|c| c["state"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            states.push(state);
        }
        states.sort();
        if states == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{channel}: {states:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Everything at once:
/// three daemons on one database with Telegram, Discord, Slack, WhatsApp
/// and a schedule attached and clients on every node; the daemon polling
/// Telegram is killed in the middle of a turn. No accepted message is
/// lost, none is answered twice, every session's turns run in acceptance
/// order, every channel comes back on a surviving node, and the schedule
/// fires once per firing throughout.
#[cfg(all(
    feature = "telegram",
    feature = "discord",
    feature = "slack",
    feature = "whatsapp"
))]
#[tokio::test(flavor = "multi_thread")]
async fn three_daemons_with_every_channel_and_a_schedule_lose_nothing_when_one_is_killed() {
    use flynn_testkit::discord::{DiscordUser, FakeDiscord};
    use flynn_testkit::slack::{self as sl, FakeSlack};
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
    use flynn_testkit::whatsapp::{FakeWhatsApp, Signing};

    use crate::setup::{TestConfig, owners};

    const NUMBER: &str = "15551234567";
    let database = TestDatabase::create().await;
    let url = database.url().to_owned();
    // Chats and clients on one model, the schedule on another, so the
    // turn that stalls is the one chosen.
    let model = FakeOpenAi::start().await;
    let ticks = FakeOpenAi::start().await;
    for _ in 0..100 {
        ticks.push(Reply::Text("tick done".into()));
    }
    let telegram = FakeTelegram::start().await;
    let discord = FakeDiscord::start().await;
    let slack = FakeSlack::start().await;
    let whatsapp = FakeWhatsApp::start().await;
    let tg_owner = TgUser::new(4242, "Owner");
    let dc_owner = DiscordUser::person(200_000_000_000_000_001, "owner", None);
    let dm = discord.dm_channel(&dc_owner);
    whatsapp.customer_wrote(NUMBER);
    let config = TestConfig::new(&model)
        .other_provider("ticks", &ticks)
        .telegram(&telegram, "allow_from: [\"4242\"]\nowners: [\"4242\"]")
        .discord(&discord, &owners([dc_owner.id]))
        .slack(&slack, &owners([sl::OWNER]))
        .whatsapp(&whatsapp, &owners([NUMBER]))
        .section(
            "agents:
  default: chat
  list:
    - name: chat
    - name: ticker
      model: ticks/gpt-4o-mini
automation:
  jobs:
    - name: tick
      schedule: \"*/2 * * * * *\"
      message: tick
      agent: ticker",
        )
        .section(&format!("sessions:\n  url: {url}"));
    let mut nodes: Vec<(Env, Daemon)> = (0..3)
        .map(|_| {
            let env = Env::new()
                .with_config(&config)
                .var("FLYNN_GATEWAY_TOKEN", TOKEN);
            let daemon = Daemon::start(&env);
            (env, daemon)
        })
        .collect();
    let urls = |nodes: &[(Env, Daemon)]| -> Vec<String> {
        nodes.iter().map(|(_, d)| d.url.clone()).collect()
    };
    for channel in ["telegram", "discord", "slack", "whatsapp"] {
        wait_for_states(&urls(&nodes), channel, &["connected", "standby", "standby"]).await;
    }

    // The answers each chat has had: Telegram, Discord, Slack, WhatsApp.
    let answers = || {
        [
            telegram
                .sent()
                .iter()
                .filter(|m| m.chat_id == 4242 && m.plain == "ok")
                .count(),
            discord
                .messages_in(dm)
                .into_iter()
                .filter(|m| m.content == "ok")
                .count(),
            slack
                .messages()
                .into_iter()
                .filter(|m| m.channel == sl::DM && m.text == "ok")
                .count(),
            whatsapp
                .sent()
                .iter()
                .filter(|m| m.to == NUMBER && m.text() == "ok")
                .count(),
        ]
    };
    // One message on each chat; WhatsApp's deliveries reach every node,
    // one message each (Meta's load balancer picks any).
    let chat = |nodes: &[(Env, Daemon)], round: usize| {
        telegram.push(Incoming::private(&tg_owner, &format!("telegram {round}")));
        discord
            .post(dm, &dc_owner, &format!("discord {round}"))
            .send();
        slack.push_event(
            slack.message_event(sl::DM, sl::OWNER, &format!("slack {round}")),
            &format!("Ev{round}"),
        );
        let posts: Vec<(String, flynn_testkit::whatsapp::Notification)> = nodes
            .iter()
            .enumerate()
            .map(|(i, (_, d))| {
                (
                    format!("{}/channels/whatsapp/webhook", d.url),
                    whatsapp.text_message(NUMBER, "Owner", &format!("whatsapp {round}.{i}")),
                )
            })
            .collect();
        posts
    };

    // Round 1: every channel, and a client on every node.
    for _ in 0..(4 + 3 + 3) {
        model.push(Reply::Text("ok".into()));
    }
    for (hook, message) in chat(&nodes, 1) {
        let posted = whatsapp.post(&hook, &message, Signing::AppSecret).await;
        assert_eq!(posted.status, 200, "{posted:?}");
    }
    for (i, (env, daemon)) in nodes.iter().enumerate() {
        let sent = send(env, daemon, &format!("cli:c{i}"), "hello");
        assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));
        assert_eq!(stdout(&sent).trim(), "ok");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers() != [1, 1, 1, 3] {
        assert!(Instant::now() < deadline, "round 1: {:?}", answers());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The schedule fires on one node: a run every 2 s.
    let runs = || {
        texts(
            &url,
            "SELECT id::TEXT FROM turns WHERE session_key = 'cron:tick'",
        )
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while runs().await.len() < 3 {
        assert!(Instant::now() < deadline, "the schedule does not fire");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The node polling Telegram runs a client's session; that session's
    // next turn, sent through another node, stalls half-way, and the node
    // is killed.
    let poller = texts(
        &url,
        "SELECT node FROM cluster_roles WHERE name = 'channel:telegram'",
    )
    .await;
    let index = nodes
        .iter()
        .position(|(_, d)| poller[0].contains(&format!("/{}/", d.pid())))
        .unwrap();
    let other = (index + 1) % 3;
    let sent = send(&nodes[index].0, &nodes[index].1, "cli:victim", "first");
    assert_eq!(stdout(&sent).trim(), "ok", "{}", stderr(&sent));
    let asked = model.requests().len();
    model.push(Reply::Stall(STALLED.into()));
    let waiting = nodes[other]
        .0
        .command(&[
            "send",
            "--gateway",
            &nodes[other].1.url,
            "--session",
            "cli:victim",
            "long",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while model.requests().len() == asked {
        assert!(
            Instant::now() < deadline,
            "the stalled turn never reached the model"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, mut dead) = nodes.remove(index);
    dead.signal("KILL");
    let _ = dead.wait(Duration::from_secs(10));
    let killed_at = Instant::now();
    let told = tokio::task::spawn_blocking(move || waiting.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(stderr(&told).contains("interrupted"), "{}", stderr(&told));

    // Every channel is back on a surviving node.
    for channel in ["telegram", "discord", "slack", "whatsapp"] {
        wait_for_states(&urls(&nodes), channel, &["connected", "standby"]).await;
    }
    eprintln!("every channel moved in {:?}", killed_at.elapsed());

    // Round 2: every channel again, and the clients.
    for _ in 0..(4 + 2 + 3) {
        model.push(Reply::Text("ok".into()));
    }
    for (hook, message) in chat(&nodes, 2) {
        let posted = whatsapp.post(&hook, &message, Signing::AppSecret).await;
        assert_eq!(posted.status, 200, "{posted:?}");
    }
    for (i, (env, daemon)) in nodes.iter().enumerate() {
        let sent = send(env, daemon, &format!("cli:c{}", i + 1), "again");
        assert_eq!(stdout(&sent).trim(), "ok", "{}", stderr(&sent));
    }
    let sent = send(&nodes[0].0, &nodes[0].1, "cli:victim", "next");
    assert_eq!(stdout(&sent).trim(), "ok", "{}", stderr(&sent));
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers() != [2, 2, 2, 5] {
        assert!(Instant::now() < deadline, "round 2: {:?}", answers());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The schedule goes on, on whichever node holds it now.
    let before = runs().await.len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs().await.len() < before + 2 {
        assert!(
            Instant::now() < deadline,
            "the schedule stopped with its node"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // What the database holds.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let turns: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT id, session_key, status FROM turns ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    let open: Vec<&(i64, String, String)> = turns
        .iter()
        .filter(|t| t.2 == "pending" || t.2 == "running")
        .collect();
    // A tick the schedule may be running right now aside, nothing is open.
    assert!(open.iter().all(|t| t.1 == "cron:tick"), "{open:?}");
    let cut: Vec<&(i64, String, String)> = turns
        .iter()
        .filter(|t| t.2 != "completed" && t.2 != "pending" && t.2 != "running")
        .collect();
    assert!(
        cut.iter()
            .any(|t| t.1 == "cli:victim" && t.2 == "interrupted"),
        "{turns:?}"
    );
    // Only the stalled turn, and a tick the killed node may have been
    // running, were cut short.
    assert!(
        cut.iter()
            .all(|t| t.1 == "cli:victim" || t.1 == "cron:tick"),
        "{cut:?}"
    );
    let chat_turns = turns.iter().filter(|t| t.1 != "cron:tick").count();
    assert_eq!(
        model.requests().len(),
        chat_turns,
        "one model call per chat or client turn: none answered twice"
    );
    let sessions: Vec<String> = turns
        .iter()
        .map(|t| t.1.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for session in sessions.iter().filter(|s| *s != "cron:tick") {
        assert_history_in_order(&mut conn, session).await;
    }
    // The schedule: several firings, never two runs of one.
    let gaps = texts(
        &url,
        "SELECT (created_at - LAG(created_at) OVER (ORDER BY id))::TEXT FROM turns
         WHERE session_key = 'cron:tick' ORDER BY id OFFSET 1",
    )
    .await;
    assert!(
        gaps.len() + 1 >= 5,
        "the schedule fired {} times",
        gaps.len() + 1
    );
    for gap in &gaps {
        let ms: i64 = gap.parse().unwrap();
        assert!(
            ms >= 1_000,
            "two runs of one firing, {ms} ms apart: {gaps:?}"
        );
    }
    assert_eq!(telegram.superseded_polls(), 0);
    assert_eq!(model.violations(), Vec::<String>::new());
    assert_eq!(discord.violations(), Vec::<String>::new());
    assert_eq!(slack.violations(), Vec::<String>::new());
    assert_eq!(whatsapp.violations(), Vec::<String>::new());
    for (_, daemon) in &mut nodes {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
}

/// An answer a node stored and died before sending (here its sending task
/// stops at an injected fault, then it is killed) reaches the chat from
/// the node that runs the automation after it, once.
#[cfg(feature = "telegram")]
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_a_dead_node_stored_but_never_sent_is_sent_by_a_survivor() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    use crate::setup::TestConfig;

    let database = TestDatabase::create().await;
    let url = database.url().to_owned();
    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("the stored answer".into()));
    let telegram = FakeTelegram::start().await;
    let config = TestConfig::new(&model)
        .telegram(&telegram, "owners: [\"4242\"]")
        .section(&format!("sessions:\n  url: {url}"));
    let answers = || {
        telegram
            .sent()
            .into_iter()
            .filter(|m| m.chat_id == 4242 && m.plain == "the stored answer")
            .count()
    };
    // The first node takes the channel and the automation before the
    // second starts.
    let first_env = Env::new()
        .with_config(&config)
        .var("FLYNN_FAULTS", "answer.send");
    let mut first = Daemon::start(&first_env);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let held = texts(&url, "SELECT node FROM cluster_roles ORDER BY name").await;
        if held.len() == 2
            && held
                .iter()
                .all(|n| n.contains(&format!("/{}/", first.pid())))
        {
            break;
        }
        assert!(Instant::now() < deadline, "roles: {held:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut second = Daemon::start(&Env::new().with_config(&config));

    telegram.push(Incoming::private(&TgUser::new(4242, "Owner"), "hello"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !first.log().contains("injected fault at answer.send") {
        assert!(Instant::now() < deadline, "{}", first.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answers(), 0, "{:#?}", telegram.sent());
    first.signal("KILL");
    let _ = first.wait(Duration::from_secs(10));

    let deadline = Instant::now() + Duration::from_secs(45);
    while answers() == 0 {
        assert!(
            Instant::now() < deadline,
            "the stored answer never reached the chat: {:#?}\n{}",
            telegram.sent(),
            second.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Marked sent, so no later look sends it again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !texts(
        &url,
        "SELECT id::TEXT FROM turns WHERE delivered_at IS NULL AND external_id IS NOT NULL",
    )
    .await
    .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the answer was never marked sent"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answers(), 1, "{:#?}", telegram.sent());
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert!(second.stop(Duration::from_secs(20)).success());
}

/// A file a turn sends is kept in the database: a turn running on one
/// node sends a chart to a Telegram chat whose connection another node
/// holds, and that node uploads it.
#[cfg(feature = "telegram")]
#[tokio::test(flavor = "multi_thread")]
async fn a_file_a_turn_on_one_node_sends_reaches_the_chat_another_node_holds() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
    use serde_json::json;

    use crate::setup::TestConfig;

    let database = TestDatabase::create().await;
    let url = database.url().to_owned();
    let model = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start().await;
    let workspace = tempfile::tempdir().unwrap();
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &[5u8; 400][..]].concat();
    std::fs::write(workspace.path().join("chart.png"), &png).unwrap();
    let config = TestConfig::new(&model)
        .telegram(&telegram, "owners: [\"4242\"]")
        .section(&format!("sessions:\n  url: {url}"))
        .section(&format!(
            "tools:\n  workspace: {}",
            workspace.path().display()
        ));
    // The first node takes the channel before the second starts.
    let first_env = Env::new().with_config(&config);
    let mut first = Daemon::start(&first_env);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !texts(
        &url,
        "SELECT node FROM cluster_roles WHERE name = 'channel:telegram'",
    )
    .await
    .iter()
    .any(|n| n.contains(&format!("/{}/", first.pid())))
    {
        assert!(Instant::now() < deadline, "{}", first.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second_env = Env::new().with_config(&config);
    let mut second = Daemon::start(&second_env);
    // The chat's session runs on the second node from its first message.
    model.push(Reply::Text("Ready.".into()));
    let warm = second_env.run(&[
        "send",
        "--gateway",
        &second.url,
        "--session",
        "telegram:4242",
        "are you there?",
    ]);
    assert!(warm.status.success(), "{}", stderr(&warm));
    let holder = texts(
        &url,
        "SELECT node FROM session_leases WHERE session_key = 'telegram:4242'",
    )
    .await;
    assert!(
        holder
            .iter()
            .any(|n| n.contains(&format!("/{}/", second.pid()))),
        "{holder:?}"
    );

    model.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "chart.png", "caption": "Sales by month"}),
    )]));
    model.push(Reply::Text("Here is the chart.".into()));
    telegram.push(Incoming::private(
        &TgUser::new(4242, "Owner"),
        "send me the chart",
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    while telegram.files_sent().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the chart never reached the chat: {:#?}\n{}\n{}",
            telegram.sent(),
            first.log(),
            second.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let files = telegram.files_sent();
    assert_eq!(
        (
            files[0].method.as_str(),
            files[0].file_name.as_str(),
            files[0].caption.as_deref()
        ),
        ("sendPhoto", "chart.png", Some("Sales by month"))
    );
    assert_eq!(files[0].data, png);
    assert!(
        !telegram
            .sent()
            .iter()
            .any(|m| m.plain.contains("could not send")),
        "{:#?}",
        telegram.sent()
    );
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert!(second.stop(Duration::from_secs(20)).success());
    assert!(first.stop(Duration::from_secs(20)).success());
}
