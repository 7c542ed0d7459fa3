//! The files under `config/`: the commented defaults and the schema.

use flynn_protocol::config::FlynnConfig;

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
fn schema_file_is_up_to_date() {
    let on_disk = std::fs::read_to_string(SCHEMA_PATH).unwrap_or_default();
    assert!(
        on_disk == flynn_config::schema_json(),
        "config/flynn.schema.json is stale: run `cargo xtask codegen`"
    );
}
