//! Integration tests for flynn-config: one binary, one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents;
mod edit;
mod errors;
mod expansion;
mod files;
mod paths;
mod profiles;
mod yaml;
mod zero_config;

use std::path::Path;

use flynn_config::{MapEnv, parse_str};
use flynn_protocol::config::FlynnConfig;

/// Parses `text` as `config.yaml` with `env`, errors as their messages.
fn parse_with(text: &str, env: &MapEnv) -> Result<FlynnConfig, String> {
    parse_str(text, Path::new("config.yaml"), env).map_err(|e| e.to_string())
}

/// Parses `text` as `config.yaml` in an empty environment.
fn parse(text: &str) -> Result<FlynnConfig, String> {
    parse_with(text, &MapEnv::new())
}
