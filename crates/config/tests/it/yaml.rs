//! YAML features a config file may use.

use flynn_protocol::config::{ProviderConfig, ProviderKind};

use crate::parse;

#[test]
fn anchors_aliases_and_merge_keys_work() {
    let text = "\
providers:
  gpu1: &local
    kind: openai-compatible
    base_url: http://10.0.0.1:8080/v1
    read_timeout_secs: 600
  gpu2:
    <<: *local
    base_url: http://10.0.0.2:8080/v1
  gpu3: *local
";
    let config = parse(text).unwrap();
    let local = |url: &str| ProviderConfig {
        base_url: Some(url.to_owned()),
        read_timeout_secs: 600,
        ..ProviderConfig::new(ProviderKind::OpenaiCompatible)
    };
    assert_eq!(config.providers["gpu1"], local("http://10.0.0.1:8080/v1"));
    assert_eq!(config.providers["gpu2"], local("http://10.0.0.2:8080/v1"));
    assert_eq!(config.providers["gpu3"], local("http://10.0.0.1:8080/v1"));
}

#[test]
fn errors_inside_an_alias_point_at_the_alias() {
    assert_eq!(
        parse("providers:\n  a: &p {kind: ollama, base_url: nope}\n  b: *p\n"),
        Err("config.yaml:2:34: providers.a.base_url: invalid URL 'nope', expected an http:// or https:// URL with a host\nconfig.yaml:3:6: providers.b.base_url: invalid URL 'nope', expected an http:// or https:// URL with a host".to_owned())
    );
}

#[test]
fn other_yaml_errors() {
    for (text, message) in [
        (
            "version: 1\n---\nversion: 1\n",
            "config.yaml:3:1: invalid YAML: only single YAML document expected but multiple found",
        ),
        (
            "providers: *nowhere\n",
            "config.yaml:1:12: invalid YAML: reference to unknown value",
        ),
        (
            "agents:\n\tmax_iterations: 3\n",
            "config.yaml:2:2: invalid YAML: tabs disallowed within this context (block indentation)",
        ),
        (
            "hello\n",
            "config.yaml:1:1: found the string 'hello', expected a mapping with keys from: version, providers, models, agents, tools, sessions, gateway, compaction, memory, channels, automation, mcp, voice, google",
        ),
        (
            "agents: {max_iterations: 99999999999999999999999999}\n",
            "config.yaml:1:26: agents.max_iterations: found the number 99999999999999999999999999, expected a whole number from 0 to 4294967295",
        ),
    ] {
        assert_eq!(parse(text), Err(message.to_owned()), "{text}");
    }
}
