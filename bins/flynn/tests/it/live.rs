//! Opt-in tests against real servers the project did not write (see
//! `scripts/llama-server.sh`). Each runs only when its variable is set:
//! `FLYNN_LIVE_OPENAI_BASE_URL` (an OpenAI-compatible `/v1` URL) and
//! `FLYNN_LIVE_ANTHROPIC_BASE_URL` (an Anthropic Messages base URL), and
//! are ignored otherwise: run them with
//! `cargo test -p flynn --test it live -- --ignored`. The answers are
//! whatever the model says; the tests check the protocol.

use serde_json::Value;

use crate::{Env, stderr, stdout};

/// The variable's value; a run with `--ignored` but without the variable
/// fails, so a live test never passes without a live server.
fn live(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "set {name} to run this test against a live server (see scripts/llama-server.sh)"
        ),
    }
}

/// Two turns of one session through a provider of this `kind`, with short
/// answers so a small model's context is not exhausted.
fn two_turns(kind: &str, base_url: &str, key_var: &str) {
    let env = Env::new();
    let key = std::env::var(key_var).unwrap_or_else(|_| "sk-live".into());
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        format!(
            "providers:\n  live: {{kind: {kind}, base_url: \"{base_url}\", api_key: \"{key}\"}}\nmodels:\n  tiers:\n    default: [live/default]\n  max_tokens: 64\n"
        ),
    )
    .unwrap();
    let config = path.to_str().unwrap();
    for text in ["Say hello.", "Say goodbye."] {
        let output = env.run(&[
            "send",
            "--config",
            config,
            "--json",
            "--session",
            "live:test",
            text,
        ]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let reply: Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert!(
            reply["reply"].as_str().is_some_and(|r| !r.is_empty()),
            "{reply}"
        );
        assert!(
            reply["usage"]["output_tokens"].as_u64() > Some(0),
            "{reply}"
        );
    }
    let shown = env.run(&[
        "sessions",
        "show",
        "--config",
        config,
        "--json",
        "live:test",
    ]);
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(shown["messages"].as_array().map(Vec::len), Some(4));
}

#[test]
#[ignore = "needs a live OpenAI-compatible server in FLYNN_LIVE_OPENAI_BASE_URL (scripts/llama-server.sh)"]
fn a_live_openai_compatible_server_answers_two_turns() {
    let url = live("FLYNN_LIVE_OPENAI_BASE_URL");
    two_turns("openai-compatible", &url, "FLYNN_LIVE_OPENAI_API_KEY");
}

#[test]
#[ignore = "needs a live Anthropic Messages server in FLYNN_LIVE_ANTHROPIC_BASE_URL (scripts/llama-server.sh)"]
fn a_live_anthropic_server_answers_two_turns() {
    let url = live("FLYNN_LIVE_ANTHROPIC_BASE_URL");
    two_turns("anthropic", &url, "FLYNN_LIVE_ANTHROPIC_API_KEY");
}
