//! `${VAR}` expansion through the public API.

use std::collections::BTreeMap;

use flynn_config::MapEnv;
use flynn_protocol::Tier;
use flynn_protocol::config::{FlynnConfig, ModelRef, ProviderConfig, ProviderKind};

use crate::{parse, parse_with};

fn model(s: &str) -> ModelRef {
    s.parse().unwrap()
}

#[test]
fn the_spec_example_parses_with_its_variables() {
    let text = r#"
providers:
  anthropic: { kind: anthropic, api_key: "${ANTHROPIC_API_KEY}" }
  local:     { kind: openai-compatible, base_url: "http://127.0.0.1:8080/v1" }
models:
  tiers:
    fast:    [anthropic/claude-haiku-4-5]
    default: [anthropic/claude-sonnet-4-5, local/qwen2.5]
    complex: [anthropic/claude-opus-4-6]
    local:   [local/qwen2.5]
  fallback: [local/qwen2.5]
gateway: { bind: "127.0.0.1:18800", token: "${FLYNN_GATEWAY_TOKEN}" }
"#;
    let env = MapEnv::new().with("ANTHROPIC_API_KEY", "sk-ant-1").with(
        "FLYNN_GATEWAY_TOKEN",
        "tok-0123456789abcdef0123456789abcdef",
    );
    let mut expected = FlynnConfig {
        providers: BTreeMap::from([
            (
                "anthropic".to_owned(),
                ProviderConfig {
                    api_key: Some("sk-ant-1".to_owned()),
                    ..ProviderConfig::new(ProviderKind::Anthropic)
                },
            ),
            (
                "local".to_owned(),
                ProviderConfig {
                    base_url: Some("http://127.0.0.1:8080/v1".to_owned()),
                    ..ProviderConfig::new(ProviderKind::OpenaiCompatible)
                },
            ),
        ]),
        ..FlynnConfig::default()
    };
    let tiers = &mut expected.models.tiers;
    *tiers.get_mut(Tier::Fast) = vec![model("anthropic/claude-haiku-4-5")];
    *tiers.get_mut(Tier::Default) =
        vec![model("anthropic/claude-sonnet-4-5"), model("local/qwen2.5")];
    *tiers.get_mut(Tier::Complex) = vec![model("anthropic/claude-opus-4-6")];
    *tiers.get_mut(Tier::Local) = vec![model("local/qwen2.5")];
    expected.models.fallback = vec![model("local/qwen2.5")];
    expected.gateway.token = Some("tok-0123456789abcdef0123456789abcdef".to_owned());

    assert_eq!(parse_with(text, &env), Ok(expected));
}

#[test]
fn defaults_fill_in_for_unset_variables() {
    let text = "\
providers:
  local:
    kind: openai-compatible
    base_url: http://${LLAMA_HOST:-127.0.0.1}:${LLAMA_PORT:-8080}/v1
    read_timeout_secs: ${LLAMA_TIMEOUT:-600}
models:
  tiers:
    default: [\"local/${LLAMA_MODEL:-qwen2.5}\"]
";
    let config = parse_with(text, &MapEnv::new().with("LLAMA_PORT", "9000")).unwrap();
    assert_eq!(
        config.providers["local"],
        ProviderConfig {
            base_url: Some("http://127.0.0.1:9000/v1".to_owned()),
            read_timeout_secs: 600,
            ..ProviderConfig::new(ProviderKind::OpenaiCompatible)
        }
    );
    assert_eq!(config.models.tiers.default, [model("local/qwen2.5")]);
}

#[test]
fn an_empty_expansion_leaves_the_key_unset() {
    let text = "\
providers:
  openai:
    kind: openai
    api_key: ${OPENAI_API_KEY:-}
    base_url: \"${OPENAI_BASE_URL:-}\"
gateway:
  bind: ${FLYNN_BIND:-}
  token: ${FLYNN_GATEWAY_TOKEN}
";
    let env = MapEnv::new().with("FLYNN_GATEWAY_TOKEN", "");
    let config = parse_with(text, &env).unwrap();
    assert_eq!(
        config.providers["openai"],
        ProviderConfig::new(ProviderKind::Openai)
    );
    assert_eq!(config.gateway, FlynnConfig::default().gateway);
}

#[test]
fn dollar_dollar_brace_writes_a_literal_reference() {
    let text = "agents:\n  system_prompt: \"Write shell as $${HOME}, cost in $5, $$ stays\"\n";
    assert_eq!(
        parse(text).unwrap().agents.system_prompt.as_deref(),
        Some("Write shell as ${HOME}, cost in $5, $$ stays")
    );
}

#[test]
fn values_are_expanded_once_not_recursively() {
    let env = MapEnv::new().with("TOKEN", "${NOT_EXPANDED}");
    let config = parse_with("agents:\n  system_prompt: ${TOKEN}\n", &env).unwrap();
    assert_eq!(
        config.agents.system_prompt.as_deref(),
        Some("${NOT_EXPANDED}")
    );
}

#[test]
fn references_in_block_scalars_keep_their_line() {
    let text = "agents:\n  system_prompt: |\n    You are Flynn.\n    Today is ${TODAY}.\n";
    assert_eq!(
        parse(text),
        Err("config.yaml:4:14: agents.system_prompt: environment variable TODAY is not set, expected it to be set or a default as in ${TODAY:-default}".to_owned())
    );
}

#[test]
fn comments_are_not_expanded() {
    let text = "# api_key: ${NOT_SET}\nversion: 1 # ${ALSO_NOT_SET}\n";
    assert_eq!(parse(text), Ok(FlynnConfig::default()));
}

#[test]
fn secrets_from_the_environment_stay_out_of_messages() {
    let env = MapEnv::new().with("ANTHROPIC_API_KEY", "sk-ant-secret");
    assert_eq!(
        parse_with("agents:\n  max_iterations: ${ANTHROPIC_API_KEY}\n", &env),
        Err("config.yaml:2:19: agents.max_iterations: found the value of '${ANTHROPIC_API_KEY}', expected a whole number from 0 to 4294967295".to_owned())
    );
}
