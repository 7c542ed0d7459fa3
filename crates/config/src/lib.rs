//! Loads and validates Flynn's YAML configuration.

/// The JSON Schema of the configuration file, pretty-printed with a
/// trailing newline (the content of `config/flynn.schema.json`).
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(flynn_protocol::config::FlynnConfig);
    let mut out = serde_json::to_string_pretty(&schema).unwrap_or_default();
    out.push('\n');
    out
}
