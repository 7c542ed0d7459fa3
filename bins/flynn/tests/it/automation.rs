//! Automation through the real daemon (`flynn start`): a cron job from
//! the config file runs at its time and its answer reaches Telegram.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
use flynn_testkit::{FakeOpenAi, Reply};

use crate::daemon::Daemon;
use crate::setup::TestConfig;
use crate::{Env, stderr, stdout};

/// A 6-field cron expression (seconds first) for the UTC time `ahead`
/// from now: it runs once a day, so once in this test.
fn once_in(ahead: Duration) -> String {
    let due = (SystemTime::now() + ahead)
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 86_400;
    format!("{} {} {} * * *", due % 60, due / 60 % 60, due / 3600)
}

#[tokio::test]
async fn a_cron_job_reports_to_telegram_through_the_daemon() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Report: **all systems nominal**.".into()));
    let telegram = FakeTelegram::start().await;
    let owner = TgUser::new(4242, "Owner");
    let config = TestConfig::new(&model)
        .telegram(&telegram, "allow_from: [\"4242\"]")
        .section(&format!(
            "automation:
  jobs:
    - name: daily-report
      schedule: \"{}\"
      message: Write the daily report
      deliver_to: \"telegram:4242\"",
            once_in(Duration::from_secs(6))
        ));
    let env = Env::new().with_config(&config);
    let daemon = Daemon::start(&env);
    let wait = |what: &str, check: &dyn Fn(&FakeTelegram) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check(&telegram) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; sent: {:#?}\n{}",
                telegram.sent(),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // A bot writes only to chats it knows: the owner has talked to it (a
    // chat command, answered without the model).
    telegram.push(Incoming::private(&owner, "/help"));
    wait("the /help answer", &|t| !t.sent().is_empty());

    wait("the report", &|t| {
        t.sent().iter().any(|m| m.plain.starts_with("Report:"))
    });
    let reports: Vec<_> = telegram
        .sent()
        .into_iter()
        .filter(|m| m.plain.starts_with("Report:"))
        .collect();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert_eq!(reports[0].chat_id, 4242);
    assert_eq!(reports[0].text, "Report: <b>all systems nominal</b>.");
    let chats: Vec<_> = model
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(chats.len(), 1);
    let messages = chats[0].body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"],
        "Write the daily report"
    );

    // The run is a turn of its own session, like any other.
    let session = env.run(&[
        "sessions",
        "show",
        "cron:daily-report",
        "--gateway",
        &daemon.url,
    ]);
    assert_eq!(
        stdout(&session),
        "automation:cron:daily-report: Write the daily report\nassistant: Report: **all systems nominal**.\n",
        "{}",
        stderr(&session)
    );
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert_eq!(model.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_webhooks_answer_is_delivered_to_telegram() {
    const SECRET: &str = "a-webhook-secret-of-at-least-32-bytes!!";
    let model = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start().await;
    let owner = TgUser::new(4242, "Owner");
    let config = TestConfig::new(&model)
        .telegram(&telegram, "allow_from: [\"4242\"]")
        .section(&format!(
            "gateway:\n  webhooks:\n    ci:\n      secret: \"{SECRET}\"\n      deliver_to: \"telegram:4242\""
        ));
    let env = Env::new().with_config(&config);
    let daemon = Daemon::start(&env);
    let wait = |what: &str, done: &dyn Fn(&FakeTelegram) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(&telegram) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; sent: {:#?}\n{}",
                telegram.sent(),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // A bot writes only to chats it knows.
    telegram.push(Incoming::private(&owner, "/help"));
    wait("the /help answer", &|t| !t.sent().is_empty());

    model.push(Reply::Text("Build 42 failed on main.".into()));
    let body = r#"{"build":42,"status":"failed"}"#;
    let response = reqwest::Client::new()
        .post(format!("{}/webhooks/ci", daemon.url))
        .header(
            "x-flynn-signature",
            flynn_core::gateway::sign(SECRET.as_bytes(), body.as_bytes()),
        )
        .header("x-flynn-delivery", "d-1")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    wait("the webhook's answer", &|t| {
        t.sent()
            .iter()
            .any(|m| m.plain == "Build 42 failed on main.")
    });
    let answer = telegram
        .sent()
        .into_iter()
        .find(|m| m.plain == "Build 42 failed on main.")
        .unwrap();
    assert_eq!(answer.chat_id, 4242);
    assert_eq!(telegram.violations(), Vec::<String>::new());
}
