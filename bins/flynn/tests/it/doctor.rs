//! `flynn doctor` against the fakes: each check's verdict and fix.

use flynn_testkit::FakeOpenAi;
use serde_json::Value;

use crate::{Env, stderr, stdout};

/// The checks as `(check, status, message)`, from `--json`.
fn verdicts(output: &std::process::Output) -> Vec<(String, String, String)> {
    let checks: Value = serde_json::from_str(&stdout(output)).unwrap();
    checks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
                c["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn each_provider_is_probed_and_a_refused_key_or_dead_server_fails_with_its_fix() {
    let fake = FakeOpenAi::start_with_key("sk-right").await;
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = env.path().join("flynn.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  good: {{ kind: openai, base_url: \"{base}\", api_key: sk-right }}\n  \
             stale: {{ kind: openai, base_url: \"{base}\", api_key: sk-old }}\n  \
             down: {{ kind: openai-compatible, base_url: \"http://127.0.0.1:{port}/v1\" }}\n\
             models:\n  tiers:\n    default: [good/gpt-4o-mini]\n    fast: [stale/gpt-4o-mini]\n\
             gateway:\n  bind: 127.0.0.1:{port}\n",
            base = fake.base_url()
        ),
    )
    .unwrap();
    let file = config.to_str().unwrap();
    let output = env.run(&["doctor", "--json", "--config", file]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let verdicts = verdicts(&output);
    let mut statuses: Vec<(&str, &str)> = verdicts
        .iter()
        .map(|(c, s, _)| (c.as_str(), s.as_str()))
        .collect();
    // After the sandbox, with the browser tools: ok or warn, as this
    // machine has Chromium or not.
    if cfg!(feature = "browser") {
        assert_eq!(statuses.remove(7).0, "browser", "{verdicts:?}");
    }
    assert_eq!(
        statuses,
        [
            ("config", "ok"),
            ("models", "ok"),
            ("provider", "fail"),
            ("provider", "ok"),
            ("provider", "fail"),
            ("database", "ok"),
            ("sandbox", statuses[6].1),
            ("gateway", "warn"),
            ("security", "ok"),
            ("security", "ok"),
            ("security", "ok"),
        ]
    );
    // Providers in name order: down, good, stale.
    assert!(
        verdicts[2].2.starts_with("down: cannot connect"),
        "{verdicts:?}"
    );
    assert!(
        verdicts[3].2.starts_with(&format!(
            "good (openai): {}/models answered in",
            fake.base_url()
        )),
        "{verdicts:?}"
    );
    assert!(verdicts[3].2.ends_with(", 2 model(s)"), "{verdicts:?}");
    assert!(verdicts[4].2.starts_with("stale"), "{verdicts:?}");
    assert_eq!(
        verdicts[5].2,
        format!(
            "{}: not created yet (the first message creates it)",
            env.path().join("home/sessions.db").display()
        )
    );
    assert!(
        !env.path().join("home/sessions.db").exists(),
        "doctor changes nothing"
    );
    assert_eq!(
        verdicts.iter().find(|v| v.0 == "gateway").unwrap().2,
        format!("no daemon answers at http://127.0.0.1:{port}")
    );

    // The text form: the verdict, the check, then the fix under it.
    let text = env.run(&["doctor", "--config", file]);
    assert_eq!(text.status.code(), Some(1));
    let lines = stdout(&text);
    assert!(
        lines.contains(&format!(
            "FAIL  provider  down: cannot connect to http://127.0.0.1:{port}/v1/models"
        )),
        "{lines}"
    );
    assert!(
        lines.contains(&format!(
            "                fix: start the server or correct providers.down.base_url (now http://127.0.0.1:{port}/v1)\n"
        )),
        "{lines}"
    );
    assert!(
        lines.contains(
            "                fix: the server refused the key: check providers.stale.api_key\n"
        ),
        "{lines}"
    );
    assert_eq!(stderr(&text), "error: 2 check(s) failed\n");
    // Only the model lists were asked for: no model call was made.
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.method == "GET" && r.path == "/v1/models")
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_healthy_set_up_with_a_running_daemon_passes() {
    let fake = FakeOpenAi::start_with_key("sk-x").await;
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let mut daemon = env
        .command(&["start", "--bind", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(daemon.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        let read = std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        assert!(read > 0, "the daemon stopped");
        if let Some((_, rest)) = line.split_once("listening on ") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let output = env.run(&["doctor", "--json", "--gateway", &url]);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let verdicts = verdicts(&output);
    assert_eq!(
        verdicts[0],
        (
            "config".to_owned(),
            "warn".to_owned(),
            format!(
                "no file at {}: running on environment variables alone",
                env.path().join("config/flynn/config.yaml").display()
            )
        )
    );
    let gateway = verdicts.iter().rev().find(|v| v.0 == "gateway").unwrap();
    assert_eq!((gateway.0.as_str(), gateway.1.as_str()), ("gateway", "ok"));
    assert!(
        gateway.2.starts_with(&format!(
            "daemon {} at {url}: ok, up ",
            env!("CARGO_PKG_VERSION")
        )),
        "{gateway:?}"
    );
    let failed: Vec<_> = verdicts
        .iter()
        .filter(|(check, status, _)| status == "fail" && check != "sandbox")
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn an_invalid_config_is_the_one_failure_reported() {
    let env = Env::new();
    let config = env.path().join("flynn.yaml");
    std::fs::write(&config, "gateway:\n  bnd: x\n").unwrap();
    let output = env.run(&["doctor", "--config", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!(
            "FAIL  config    {}:2:3: gateway.bnd",
            config.display()
        )),
        "{text}"
    );
    assert!(text.contains("fix: correct the file"), "{text}");
}

#[tokio::test]
async fn a_server_without_a_model_list_is_a_warning_not_a_failure() {
    // This server answers 404 to the model list (the strict fake records
    // the unknown path; that is the point here).
    let fake = FakeOpenAi::start().await;
    let env = Env::new();
    let config = env.path().join("flynn.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  box: {{ kind: openai-compatible, base_url: \"{}/nolist\" }}\n\
             models:\n  tiers:\n    default: [box/m]\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let output = env.run(&["doctor", "--json", "--config", config.to_str().unwrap()]);
    let verdicts = verdicts(&output);
    let provider = verdicts.iter().find(|(c, ..)| c == "provider").unwrap();
    assert_eq!(provider.1, "warn", "{provider:?}");
    assert!(
        provider.2.starts_with("box (openai-compatible) answers at")
            && provider.2.ends_with("but lists no models (HTTP 404)"),
        "{provider:?}"
    );
}

/// Whether the `flynn` under test has the adapter: what flynn-channels was
/// compiled with, which features of other workspace crates (the fuzz
/// targets want every adapter) can widen beyond this package's own.
fn built_with(channel: &str) -> bool {
    flynn_core::channel::COMPILED.contains(&channel)
}

/// A channel in the config that this build cannot run is a failure that
/// says how to get one that can; without a daemon, a channel this build
/// has is only checked when the daemon runs.
#[tokio::test]
async fn a_configured_channel_is_checked_against_what_this_build_has() {
    let fake = FakeOpenAi::start().await;
    let env = Env::new();
    let config = env.path().join("flynn.yaml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &config,
        format!(
            "providers:\n  good: {{ kind: openai, base_url: \"{}\", api_key: sk-x }}\n\
             models:\n  tiers:\n    default: [good/gpt-4o-mini]\n\
             gateway:\n  bind: 127.0.0.1:{port}\n\
             channels:\n  telegram:\n    bot_token: \"1:x\"\n  slack:\n    bot_token: xoxb-1\n    app_token: xapp-1\n    enabled: false\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let output = env.run(&["doctor", "--json", "--config", config.to_str().unwrap()]);
    let channels: Vec<(String, String, String)> = verdicts(&output)
        .into_iter()
        .filter(|(check, _, _)| check == "channel")
        .collect();
    let telegram = if built_with("telegram") {
        (
            "ok",
            "telegram: configured; its connection is checked while the daemon runs",
        )
    } else {
        (
            "fail",
            "telegram: configured, but this build of Flynn has no telegram support",
        )
    };
    assert_eq!(
        channels
            .iter()
            .map(|(_, s, m)| (s.as_str(), m.as_str()))
            .collect::<Vec<_>>(),
        [
            telegram,
            ("ok", "slack: turned off (channels.slack.enabled)")
        ]
    );
    // Without owners every sender is a guest: the doctor says how to
    // name them.
    let owners: Vec<(String, String)> = verdicts(&output)
        .into_iter()
        .filter(|(check, _, message)| check == "security" && message.starts_with("telegram:"))
        .map(|(_, status, message)| (status, message))
        .collect();
    assert_eq!(
        owners,
        [(
            "warn".to_owned(),
            "telegram: no owners named, so every sender is a guest (own session and memory, the messaging tools, no approvals)".to_owned()
        )]
    );
    let text = env.run(&["doctor", "--config", config.to_str().unwrap()]);
    assert!(
        stdout(&text).contains("channels.telegram.owners")
            && stdout(&text).contains("flynn pairing approve telegram <code> --owner"),
        "{}",
        stdout(&text)
    );
    assert_eq!(
        output.status.code(),
        Some(if built_with("telegram") { 0 } else { 1 }),
        "{}",
        stdout(&output)
    );
}

/// The voice set-up: a local speech program found with opusenc, one that
/// is missing, and `voice.reply` with nothing to speak.
#[tokio::test]
async fn the_voice_set_up_is_checked() {
    let model = FakeOpenAi::start().await;
    let voice_of = |yaml: &str| {
        let config = crate::setup::TestConfig::new(&model).section(yaml);
        let env = Env::new().with_config(&config);
        let output = env.run(&["doctor", "--json"]);
        verdicts(&output)
            .into_iter()
            .filter(|(check, _, _)| check == "voice")
            .map(|(_, status, message)| (status, message))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        voice_of("voice:\n  tts:\n    provider: command\n    command: espeak-ng --stdout\n  reply: auto"),
        [(
            "ok".to_owned(),
            "answers are spoken by `espeak-ng`, encoded by opusenc as voice notes (voice.reply: auto)".to_owned()
        )]
    );
    assert_eq!(
        voice_of("voice:\n  tts:\n    provider: command\n    command: no-such-speaker -o -"),
        [(
            "warn".to_owned(),
            "voice.tts runs `no-such-speaker`, which is not on the PATH".to_owned()
        )]
    );
    assert_eq!(
        voice_of("voice:\n  reply: always"),
        [(
            "warn".to_owned(),
            "voice.reply is always but nothing speaks: answers stay text".to_owned()
        )]
    );
    assert_eq!(voice_of("voice: {}"), []);
}
