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
        let messages: Vec<(String, Option<i64>)> = sqlx::query_as(
            "SELECT role, turn_id FROM messages WHERE session_key = $1 ORDER BY pos",
        )
        .bind(session)
        .fetch_all(&mut conn)
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
        // Each user message is followed by exactly one answer or note.
        let roles: Vec<&str> = messages.iter().map(|m| m.0.as_str()).collect();
        for pair in roles.chunks(2) {
            assert_eq!(pair, ["user", "assistant"], "{session}: {roles:?}");
        }
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

/// Runs a query on the test database and returns one column of text.
#[cfg(feature = "telegram")]
async fn texts(url: &str, sql: &str) -> Vec<String> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(&mut conn)
        .await
        .unwrap()
}

#[cfg(feature = "telegram")]
#[tokio::test(flavor = "multi_thread")]
async fn one_node_polls_telegram_and_fires_the_schedule_and_another_takes_over_when_it_dies() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    use crate::setup::TestConfig;

    let database = TestDatabase::create().await;
    let model = FakeOpenAi::start().await;
    for _ in 0..80 {
        model.push(Reply::Text("ok".into()));
    }
    let telegram = FakeTelegram::start().await;
    let owner = TgUser::new(4242, "Owner");
    let config = TestConfig::new(&model)
        .telegram(&telegram, "allow_from: [\"4242\"]\nowners: [\"4242\"]")
        .section(
            "automation:
  jobs:
    - name: tick
      schedule: \"*/2 * * * * *\"
      message: tick",
        )
        .section(&format!("sessions:\n  url: {}", database.url()));
    let mut nodes: Vec<(Env, Daemon)> = (0..3)
        .map(|_| {
            let env = Env::new().with_config(&config);
            let daemon = Daemon::start(&env);
            (env, daemon)
        })
        .collect();
    let url = database.url().to_owned();
    let wait = |what: &str, limit: Duration, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let answers = |telegram: &FakeTelegram| {
        telegram
            .sent()
            .iter()
            .filter(|m| m.chat_id == 4242 && m.plain == "ok")
            .count()
    };

    telegram.push(Incoming::private(&owner, "hello"));
    wait("the first answer", Duration::from_secs(20), &|| {
        answers(&telegram) == 1
    });
    // The schedule fires on one node: a turn every 2 s, never two at once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let ticks = loop {
        let ticks = texts(
            &url,
            "SELECT created_at::TEXT FROM turns WHERE session_key = 'cron:tick' ORDER BY id",
        )
        .await;
        if ticks.len() >= 3 {
            break ticks;
        }
        assert!(
            Instant::now() < deadline,
            "the schedule fired {} times",
            ticks.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(ticks.len() >= 3);
    // Three daemons on one bot, and no long poll was cut short by another.
    assert_eq!(telegram.superseded_polls(), 0);
    let holders = texts(
        &url,
        "SELECT name || '=' || node FROM cluster_roles ORDER BY name",
    )
    .await;
    assert_eq!(holders.len(), 2, "{holders:?}");

    // The node polling Telegram dies.
    let poller = holders
        .iter()
        .find_map(|h| h.strip_prefix("channel:telegram="))
        .unwrap()
        .to_owned();
    let index = nodes
        .iter()
        .position(|(_, d)| poller.contains(&format!("/{}/", d.pid())))
        .unwrap();
    let (_, mut dead) = nodes.remove(index);
    dead.signal("KILL");
    let _ = dead.wait(Duration::from_secs(10));
    let killed_at = Instant::now();
    telegram.push(Incoming::private(&owner, "still there?"));
    wait(
        "the answer after the poller died",
        Duration::from_secs(30),
        &|| answers(&telegram) == 2,
    );
    eprintln!("telegram moved in {:?}", killed_at.elapsed());

    // The schedule goes on (on whichever node holds it now), still once
    // per firing.
    let before = texts(
        &url,
        "SELECT id::TEXT FROM turns WHERE session_key = 'cron:tick'",
    )
    .await
    .len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while texts(
        &url,
        "SELECT id::TEXT FROM turns WHERE session_key = 'cron:tick'",
    )
    .await
    .len()
        < before + 2
    {
        assert!(
            Instant::now() < deadline,
            "the schedule stopped with its node"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gaps = texts(
        &url,
        "SELECT (created_at - LAG(created_at) OVER (ORDER BY id))::TEXT FROM turns
         WHERE session_key = 'cron:tick' ORDER BY id OFFSET 1",
    )
    .await;
    for gap in &gaps {
        let ms: i64 = gap.parse().unwrap();
        assert!(
            ms >= 1_000,
            "two runs of one firing, {ms} ms apart: {gaps:?}"
        );
    }
    assert_eq!(answers(&telegram), 2, "each message answered once");
    for (_, daemon) in &mut nodes {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
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

#[cfg(feature = "discord")]
#[tokio::test(flavor = "multi_thread")]
async fn one_node_holds_the_discord_gateway_and_another_takes_it_when_it_dies() {
    use flynn_testkit::discord::{DiscordUser, FakeDiscord};

    use crate::setup::{TestConfig, owners};

    let database = TestDatabase::create().await;
    let model = FakeOpenAi::start().await;
    let discord = FakeDiscord::start().await;
    let owner = DiscordUser::person(200_000_000_000_000_001, "owner", None);
    let dm = discord.dm_channel(&owner);
    let config = TestConfig::new(&model)
        .discord(&discord, &owners([owner.id]))
        .section(&format!("sessions:\n  url: {}", database.url()));
    let mut nodes: Vec<Daemon> = (0..3)
        .map(|_| {
            Daemon::start(
                &Env::new()
                    .with_config(&config)
                    .var("FLYNN_GATEWAY_TOKEN", TOKEN),
            )
        })
        .collect();
    wait_for_states(&nodes, "discord", &["connected", "standby", "standby"]).await;
    assert_eq!(
        discord.identifies(),
        1,
        "one gateway session for three daemons"
    );

    let answers = |discord: &FakeDiscord| {
        discord
            .messages_in(dm)
            .into_iter()
            .filter(|m| m.content.starts_with("answer"))
            .count()
    };
    model.push(Reply::Text("answer one".into()));
    discord.post(dm, &owner, "hello").send();
    let deadline = Instant::now() + Duration::from_secs(20);
    while answers(&discord) < 1 {
        assert!(
            Instant::now() < deadline,
            "the first message was not answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The connected node dies: another identifies and answers.
    let index = holder_of(database.url(), "channel:discord", &nodes).await;
    let mut dead = nodes.remove(index);
    dead.signal("KILL");
    let _ = dead.wait(Duration::from_secs(10));
    wait_for_states(&nodes, "discord", &["connected", "standby"]).await;
    assert_eq!(discord.identifies(), 2);
    model.push(Reply::Text("answer two".into()));
    discord.post(dm, &owner, "still there?").send();
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers(&discord) < 2 {
        assert!(
            Instant::now() < deadline,
            "the message after the failover was not answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answers(&discord), 2, "each answered once");
    assert_eq!(discord.violations(), Vec::<String>::new());
    for daemon in &mut nodes {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
}

#[cfg(feature = "slack")]
#[tokio::test(flavor = "multi_thread")]
async fn one_node_holds_the_slack_socket_and_another_takes_it_when_it_dies() {
    use flynn_testkit::slack::{self as sl, FakeSlack};

    use crate::setup::{TestConfig, owners};

    let database = TestDatabase::create().await;
    let model = FakeOpenAi::start().await;
    let slack = FakeSlack::start().await;
    let config = TestConfig::new(&model)
        .slack(&slack, &owners([sl::OWNER]))
        .section(&format!("sessions:\n  url: {}", database.url()));
    let mut nodes: Vec<Daemon> = (0..3)
        .map(|_| {
            Daemon::start(
                &Env::new()
                    .with_config(&config)
                    .var("FLYNN_GATEWAY_TOKEN", TOKEN),
            )
        })
        .collect();
    wait_for_states(&nodes, "slack", &["connected", "standby", "standby"]).await;
    assert_eq!(
        slack.connections_opened(),
        1,
        "one socket for three daemons"
    );

    let answers = |slack: &FakeSlack| {
        slack
            .messages()
            .into_iter()
            .filter(|m| m.channel == sl::DM && m.text.starts_with("answer"))
            .count()
    };
    model.push(Reply::Text("answer one".into()));
    slack.push_event(slack.message_event(sl::DM, sl::OWNER, "hello"), "Ev1");
    let deadline = Instant::now() + Duration::from_secs(20);
    while answers(&slack) < 1 {
        assert!(
            Instant::now() < deadline,
            "the first message was not answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let index = holder_of(database.url(), "channel:slack", &nodes).await;
    let mut dead = nodes.remove(index);
    dead.signal("KILL");
    let _ = dead.wait(Duration::from_secs(10));
    wait_for_states(&nodes, "slack", &["connected", "standby"]).await;
    assert_eq!(slack.connections_opened(), 2);
    model.push(Reply::Text("answer two".into()));
    slack.push_event(
        slack.message_event(sl::DM, sl::OWNER, "still there?"),
        "Ev2",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers(&slack) < 2 {
        assert!(
            Instant::now() < deadline,
            "the message after the failover was not answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answers(&slack), 2, "each answered once");
    assert_eq!(slack.violations(), Vec::<String>::new());
    for daemon in &mut nodes {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
}

/// Each node's state of `channel` (`channels.status`), sorted, once they
/// are `expected` (within 30 s).
#[cfg(any(feature = "discord", feature = "slack", feature = "whatsapp"))]
async fn wait_for_states(nodes: &[Daemon], channel: &str, expected: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut states = Vec::new();
        for node in nodes {
            let status = rpc(&node.url, "channels.status").await;
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

/// The index in `nodes` of the node holding `role`.
#[cfg(any(feature = "discord", feature = "slack"))]
async fn holder_of(url: &str, role: &str, nodes: &[Daemon]) -> usize {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let holder: String = sqlx::query_scalar("SELECT node FROM cluster_roles WHERE name = $1")
        .bind(role)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    nodes
        .iter()
        .position(|d| holder.contains(&format!("/{}/", d.pid())))
        .unwrap()
}

#[cfg(feature = "whatsapp")]
#[tokio::test(flavor = "multi_thread")]
async fn whatsapp_webhooks_reaching_any_of_three_daemons_are_answered_once() {
    use flynn_testkit::whatsapp::{FakeWhatsApp, Signing};

    use crate::setup::{TestConfig, owners};

    const NUMBER: &str = "15551234567";
    let database = TestDatabase::create().await;
    let model = FakeOpenAi::start().await;
    let whatsapp = FakeWhatsApp::start().await;
    let config = TestConfig::new(&model)
        .whatsapp(&whatsapp, &owners([NUMBER]))
        .section(&format!("sessions:\n  url: {}", database.url()));
    let nodes: Vec<Daemon> = (0..3)
        .map(|_| {
            Daemon::start(
                &Env::new()
                    .with_config(&config)
                    .var("FLYNN_GATEWAY_TOKEN", TOKEN),
            )
        })
        .collect();
    wait_for_states(&nodes, "whatsapp", &["connected", "standby", "standby"]).await;

    // Meta's load balancer sends each delivery to any node: one message
    // to each, answered once each, in the one conversation.
    whatsapp.customer_wrote(NUMBER);
    for (i, node) in nodes.iter().enumerate() {
        model.push(Reply::Text(format!("answer {i}")));
        let message = whatsapp.text_message(NUMBER, "Owner", &format!("message {i}"));
        let hook = format!("{}/channels/whatsapp/webhook", node.url);
        let posted = whatsapp.post(&hook, &message, Signing::AppSecret).await;
        assert_eq!(posted.status, 200, "{posted:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while whatsapp.sent().iter().filter(|m| m.to == NUMBER).count() < i + 1 {
            assert!(Instant::now() < deadline, "message {i} was not answered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let answers: Vec<String> = whatsapp
        .sent()
        .iter()
        .filter(|m| m.to == NUMBER)
        .map(|m| m.text().to_owned())
        .collect();
    assert_eq!(answers, ["answer 0", "answer 1", "answer 2"]);
    assert_eq!(whatsapp.violations(), Vec::<String>::new());
    let mut nodes = nodes;
    for daemon in &mut nodes {
        assert!(daemon.stop(Duration::from_secs(20)).success());
    }
}
