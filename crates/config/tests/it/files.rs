//! The files under `config/`: the commented defaults and the schema.

use std::path::PathBuf;

use flynn_protocol::Tier;
use flynn_protocol::config::{
    AgentConfig, AgentRoute, AgentsConfig, FlynnConfig, HookAction, HookRule, ModelRef,
    ToolPolicyConfig, ToolProfile,
};

use crate::parse;

const DEFAULT_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../config/default.yaml"
));

const SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../config/flynn.schema.json"
);

#[test]
fn default_yaml_is_the_default_config() {
    assert_eq!(parse(DEFAULT_YAML), Ok(FlynnConfig::default()));
}

#[test]
fn default_yaml_provider_examples_parse_when_uncommented() {
    let mut text = String::new();
    let mut in_providers = false;
    for line in DEFAULT_YAML.lines() {
        if !line.starts_with(' ') {
            in_providers = line == "providers:";
        }
        match line.strip_prefix("  # ") {
            Some(example) if in_providers => text.push_str(&format!("  {example}\n")),
            _ => text.push_str(&format!("{line}\n")),
        }
    }
    let env = flynn_config::MapEnv::new()
        .with("ANTHROPIC_API_KEY", "a")
        .with("OPENAI_API_KEY", "o");
    let config = crate::parse_with(&text, &env).unwrap();
    assert_eq!(
        config.providers.keys().collect::<Vec<_>>(),
        ["anthropic", "llamacpp", "ollama", "openai"]
    );
}

#[test]
fn default_yaml_agent_route_and_hook_examples_parse_when_uncommented() {
    // The examples under `agents.list`, `agents.routes` and `tools.hooks`,
    // `agents.default`, and the providers the agents' models name.
    let mut text = String::new();
    let (mut block, mut key) = ("", "");
    for line in DEFAULT_YAML.lines() {
        if !line.starts_with(' ') {
            (block, key) = (line, "");
        } else if line.starts_with("  ") && !line[2..].starts_with([' ', '#']) {
            key = line.trim();
        }
        let example = match (block, key) {
            ("providers:", _) => line.strip_prefix("  # ").map(|rest| format!("  {rest}")),
            ("agents:", "list:" | "routes:") | ("tools:", "hooks:") => line
                .strip_prefix("    # ")
                .map(|rest| format!("    {rest}")),
            ("agents:", _) => line
                .strip_prefix("  # default: ")
                .map(|rest| format!("  default: {rest}")),
            _ => None,
        };
        text.push_str(&example.unwrap_or_else(|| line.to_owned()));
        text.push('\n');
    }
    let env = flynn_config::MapEnv::new()
        .with("ANTHROPIC_API_KEY", "a")
        .with("OPENAI_API_KEY", "o");
    let config = crate::parse_with(&text, &env).unwrap();
    assert_eq!(
        config.agents,
        AgentsConfig {
            default: Some("chat".to_owned()),
            list: vec![
                AgentConfig {
                    tier: Some(Tier::Fast),
                    tools: Some(ToolPolicyConfig {
                        profile: Some(ToolProfile::Messaging),
                        ..ToolPolicyConfig::default()
                    }),
                    ..AgentConfig::new("chat")
                },
                AgentConfig {
                    model: Some(ModelRef::new("anthropic", "claude-opus-4-6")),
                    tools: Some(ToolPolicyConfig {
                        profile: Some(ToolProfile::Coding),
                        enabled: None,
                        deny: vec!["process.*".to_owned()],
                        autonomy: None,
                        taint: None,
                    }),
                    workspace: Some(PathBuf::from("/home/me/projects")),
                    max_iterations: Some(30),
                    ..AgentConfig::new("coder")
                },
            ],
            routes: vec![
                AgentRoute {
                    channel: "telegram".to_owned(),
                    sender: "12345".to_owned(),
                    agent: "coder".to_owned(),
                },
                AgentRoute {
                    channel: "cli".to_owned(),
                    sender: "*".to_owned(),
                    agent: "coder".to_owned(),
                },
            ],
            ..AgentsConfig::default()
        }
    );
    assert_eq!(
        config.tools.hooks,
        [
            HookRule {
                tool: "shell.*".to_owned(),
                action: HookAction::Confirm,
            },
            HookRule {
                tool: "file.write".to_owned(),
                action: HookAction::Log,
            }
        ]
    );
}

#[test]
fn schema_file_is_up_to_date() {
    let on_disk = std::fs::read_to_string(SCHEMA_PATH).unwrap_or_default();
    assert!(
        on_disk == flynn_config::schema_json(),
        "config/flynn.schema.json is stale: run `cargo xtask codegen`"
    );
}

/// Every older version's sample file (`tests/fixtures/config-v<N>.yaml`)
/// migrates to a valid config of this version, keeping its comments.
#[test]
fn every_older_version_migrates_to_a_valid_config() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let current = flynn_protocol::config::CONFIG_VERSION;
    for version in (1..=current).filter(|v| *v < current) {
        let path = format!("{fixtures}/config-v{version}.yaml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}: each older version needs a sample file"));
        let migrated = flynn_config::migrate::migrate_text(&text).unwrap();
        assert_eq!(migrated.from, version);
        flynn_config::parse_str(
            &migrated.text,
            std::path::Path::new(&path),
            &flynn_config::MapEnv::new(),
        )
        .unwrap_or_else(|e| panic!("{path} after migration: {e}"));
        for comment in text.lines().filter(|l| l.trim_start().starts_with('#')) {
            assert!(migrated.text.contains(comment), "{path}: lost {comment:?}");
        }
    }
    // The current version needs no migration: the shipped default file
    // comes through unchanged.
    let default = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/default.yaml"
    ))
    .unwrap();
    let migrated = flynn_config::migrate::migrate_text(&default).unwrap();
    assert_eq!(migrated.from, flynn_protocol::config::CONFIG_VERSION);
    if default.lines().any(|l| l.starts_with("version:")) {
        assert_eq!(migrated.text, default);
    }
}
