//! A panic (a bug) in a turn, a webhook or the automation loop is caught,
//! logged with its context and reported, and the daemon keeps serving.
//! The panics are injected through `FLYNN_FAULTS` (the tests build with
//! `flynn-protocol/fault-injection`; the shipped binaries do not have
//! it). `cargo xtask chaos` runs these against the release build.

use std::time::Duration;

use flynn_testkit::{FakeOpenAi, Reply};

use crate::daemon::Daemon;
use crate::setup::{TestConfig, wait_until};
use crate::{Env, stderr, stdout};

/// The config, and the faults to inject.
fn env_with(config: &TestConfig, faults: &str) -> Env {
    Env::new().with_config(config).var("FLYNN_FAULTS", faults)
}

/// How long each thing waited for may take.
const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_turn_that_panics_fails_with_a_message_and_the_next_one_is_answered() {
    let fake = FakeOpenAi::start().await;
    let env = env_with(&TestConfig::new(&fake), "turn:1");
    let daemon = Daemon::start(&env);

    let failed = env.run(&["send", "--gateway", &daemon.url, "first"]);
    assert_ne!(failed.status.code(), Some(0));
    assert!(
        stderr(&failed).contains("a bug in Flynn stopped it (injected fault at turn"),
        "{}",
        stderr(&failed)
    );
    assert!(
        daemon
            .log()
            .contains("the turn panicked; it failed and the session carries on"),
        "{}",
        daemon.log()
    );

    fake.push(Reply::Text("Still here.".into()));
    let answered = env.run(&["send", "--gateway", &daemon.url, "second"]);
    assert_eq!(
        (answered.status.code(), stdout(&answered)),
        (Some(0), "Still here.\n".to_owned()),
        "{}",
        stderr(&answered)
    );
    // The failed turn is recorded as failed, and its message kept.
    let shown = env.run(&["sessions", "show", "--gateway", &daemon.url, "cli:default"]);
    assert_eq!(
        stdout(&shown),
        "user: first\nuser: second\nassistant: Still here.\n",
        "{}",
        stderr(&shown)
    );
}

#[tokio::test]
async fn a_webhook_handler_that_panics_answers_500_and_the_next_delivery_is_taken() {
    const SECRET: &str = "a-webhook-secret-of-at-least-32-bytes!!";
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("noted".into()));
    let env = env_with(
        &TestConfig::new(&fake).section(&format!(
            "gateway:\n  webhooks:\n    ci:\n      secret: \"{SECRET}\""
        )),
        "webhook:1",
    );
    let daemon = Daemon::start(&env);
    let post = |delivery: &str| {
        let body = format!(r#"{{"build":42,"delivery":"{delivery}"}}"#);
        let signature = flynn_core::gateway::sign(SECRET.as_bytes(), body.as_bytes());
        let url = format!("{}/webhooks/ci", daemon.url);
        let delivery = delivery.to_owned();
        async move {
            reqwest::Client::new()
                .post(url)
                .header("x-flynn-signature", signature)
                .header("x-flynn-delivery", delivery)
                .body(body)
                .send()
                .await
                .unwrap()
        }
    };
    let first = post("d1").await;
    assert_eq!(first.status().as_u16(), 500);
    let text = first.text().await.unwrap();
    assert!(
        text.contains("the gateway failed on this request"),
        "{text}"
    );
    assert!(
        daemon
            .log()
            .contains("a request handler panicked; answered 500"),
        "{}",
        daemon.log()
    );
    let second = post("d2").await;
    assert_eq!(second.status().as_u16(), 202, "{:?}", second.text().await);
    wait_until("the webhook's turn", LIMIT, &daemon, || {
        !fake.requests().is_empty()
    });
}

#[tokio::test]
async fn the_automation_loop_outlives_a_panic_and_runs_the_next_job() {
    let fake = FakeOpenAi::start().await;
    for _ in 0..8 {
        fake.push(Reply::Text("tick done".into()));
    }
    let env = env_with(
        &TestConfig::new(&fake).section(
            "automation:\n  jobs:\n    - name: every-second\n      schedule: \"* * * * * *\"\n      message: tick",
        ),
        "automation:1",
    );
    let daemon = Daemon::start(&env);
    wait_until("a cron run after the panic", LIMIT, &daemon, || {
        !fake.requests().is_empty()
    });
    assert!(
        daemon
            .log()
            .contains("the automation loop panicked starting cron job 'every-second'"),
        "{}",
        daemon.log()
    );
    // And the daemon still answers its owner.
    fake.push(Reply::Text("Still here.".into()));
    let answered = env.run(&[
        "send",
        "--gateway",
        &daemon.url,
        "--session",
        "cli:me",
        "hi",
    ]);
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
}

#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_channel_adapter_that_panics_is_restarted_and_answers() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Back up.".into()));
    let telegram = FakeTelegram::start().await;
    let env = env_with(
        &TestConfig::new(&fake).telegram(&telegram, "owners: [\"4242\"]"),
        "adapter.connect:1",
    );
    let daemon = Daemon::start(&env);
    telegram.push(Incoming::private(
        &TgUser::new(4242, "Owner"),
        "are you there?",
    ));
    wait_until("the answer on Telegram", LIMIT, &daemon, || {
        telegram.sent().iter().any(|m| m.plain == "Back up.")
    });
    let log = daemon.log();
    assert!(
        log.contains("the adapter panicked; restarting it")
            && log.contains("injected fault at adapter.connect"),
        "{log}"
    );
}
