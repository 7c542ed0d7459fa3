//! The config built from the environment when there is no file, and
//! `FLYNN_MODEL`.

use std::collections::BTreeMap;

use flynn_config::{MapEnv, from_env};
use flynn_protocol::config::{FlynnConfig, ModelRef, ProviderConfig, ProviderKind};

fn env(vars: &[(&str, &str)]) -> MapEnv {
    vars.iter().copied().collect()
}

fn provider(kind: ProviderKind, base_url: Option<&str>, api_key: Option<&str>) -> ProviderConfig {
    ProviderConfig {
        base_url: base_url.map(str::to_owned),
        api_key: api_key.map(str::to_owned),
        ..ProviderConfig::new(kind)
    }
}

/// A config with these providers and this default tier.
fn config(providers: &[(&str, ProviderConfig)], default: Option<&str>) -> FlynnConfig {
    let mut config = FlynnConfig {
        providers: providers
            .iter()
            .map(|(name, p)| ((*name).to_owned(), p.clone()))
            .collect::<BTreeMap<_, _>>(),
        ..FlynnConfig::default()
    };
    config.models.tiers.default = default
        .map(|m| vec![m.parse::<ModelRef>().unwrap()])
        .unwrap_or_default();
    config
}

#[track_caller]
fn assert_from_env(vars: &[(&str, &str)], expected: FlynnConfig) {
    assert_eq!(from_env(&env(vars)).unwrap(), expected, "env: {vars:?}");
}

#[test]
fn no_variables_means_no_providers() {
    assert_from_env(&[], FlynnConfig::default());
    assert_from_env(
        &[("ANTHROPIC_API_KEY", ""), ("PATH", "/bin")],
        FlynnConfig::default(),
    );
}

#[test]
fn anthropic_from_its_key_and_base_url() {
    assert_from_env(
        &[("ANTHROPIC_API_KEY", "sk-ant")],
        config(
            &[(
                "anthropic",
                provider(ProviderKind::Anthropic, None, Some("sk-ant")),
            )],
            Some("anthropic/claude-sonnet-4-5"),
        ),
    );
    assert_from_env(
        &[
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("ANTHROPIC_BASE_URL", "https://proxy.example.org"),
        ],
        config(
            &[(
                "anthropic",
                provider(
                    ProviderKind::Anthropic,
                    Some("https://proxy.example.org"),
                    Some("sk-ant"),
                ),
            )],
            Some("anthropic/claude-sonnet-4-5"),
        ),
    );
}

#[test]
fn anthropic_base_url_without_a_key_is_configured_but_not_chosen() {
    assert_from_env(
        &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9000")],
        config(
            &[(
                "anthropic",
                provider(ProviderKind::Anthropic, Some("http://127.0.0.1:9000"), None),
            )],
            None,
        ),
    );
}

#[test]
fn openai_kind_depends_on_key_and_base_url() {
    assert_from_env(
        &[("OPENAI_API_KEY", "sk-oa")],
        config(
            &[(
                "openai",
                provider(ProviderKind::Openai, None, Some("sk-oa")),
            )],
            Some("openai/gpt-4o-mini"),
        ),
    );
    assert_from_env(
        &[("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")],
        config(
            &[(
                "openai",
                provider(
                    ProviderKind::OpenaiCompatible,
                    Some("http://127.0.0.1:8080/v1"),
                    None,
                ),
            )],
            Some("openai/gpt-4o-mini"),
        ),
    );
    assert_from_env(
        &[
            ("OPENAI_API_KEY", "gsk"),
            ("OPENAI_BASE_URL", "https://api.groq.com/openai/v1"),
        ],
        config(
            &[(
                "openai",
                provider(
                    ProviderKind::OpenaiCompatible,
                    Some("https://api.groq.com/openai/v1"),
                    Some("gsk"),
                ),
            )],
            Some("openai/gpt-4o-mini"),
        ),
    );
    assert_from_env(
        &[
            ("OPENAI_API_KEY", "sk-oa"),
            ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        ],
        config(
            &[(
                "openai",
                provider(
                    ProviderKind::Openai,
                    Some("https://api.openai.com/v1"),
                    Some("sk-oa"),
                ),
            )],
            Some("openai/gpt-4o-mini"),
        ),
    );
}

#[test]
fn gemini_from_its_key() {
    assert_from_env(
        &[("GEMINI_API_KEY", "g")],
        config(
            &[("gemini", provider(ProviderKind::Gemini, None, Some("g")))],
            Some("gemini/gemini-2.5-flash"),
        ),
    );
}

#[test]
fn ollama_from_its_host_normalised() {
    for (host, url) in [
        ("127.0.0.1:11434", "http://127.0.0.1:11434/v1"),
        ("gpu-box", "http://gpu-box:11434/v1"),
        ("http://gpu-box:11434", "http://gpu-box:11434/v1"),
        ("0.0.0.0", "http://127.0.0.1:11434/v1"),
    ] {
        assert_from_env(
            &[("OLLAMA_HOST", host)],
            config(
                &[("ollama", provider(ProviderKind::Ollama, Some(url), None))],
                Some("ollama/llama3.2"),
            ),
        );
    }
}

#[test]
fn default_tier_prefers_anthropic_then_openai_then_gemini_then_ollama() {
    let all = [
        ("OLLAMA_HOST", "localhost:11434"),
        ("GEMINI_API_KEY", "g"),
        ("OPENAI_API_KEY", "o"),
        ("ANTHROPIC_API_KEY", "a"),
    ];
    for (skip, default) in [
        (0, "anthropic/claude-sonnet-4-5"),
        (1, "openai/gpt-4o-mini"),
        (2, "gemini/gemini-2.5-flash"),
        (3, "ollama/llama3.2"),
    ] {
        let vars = &all[..all.len() - skip];
        let config = from_env(&env(vars)).unwrap();
        assert_eq!(config.providers.len(), 4 - skip, "{vars:?}");
        assert_eq!(
            config.models.tiers.default,
            [default.parse::<ModelRef>().unwrap()],
            "{vars:?}"
        );
    }
}

#[test]
fn flynn_model_picks_the_default_tier() {
    assert_from_env(
        &[
            ("ANTHROPIC_API_KEY", "a"),
            ("OPENAI_API_KEY", "o"),
            ("FLYNN_MODEL", "openai/gpt-4.1"),
        ],
        config(
            &[
                (
                    "anthropic",
                    provider(ProviderKind::Anthropic, None, Some("a")),
                ),
                ("openai", provider(ProviderKind::Openai, None, Some("o"))),
            ],
            Some("openai/gpt-4.1"),
        ),
    );
}

#[test]
fn flynn_model_for_ollama_needs_nothing_else() {
    assert_from_env(
        &[("FLYNN_MODEL", "ollama/qwen2.5:7b")],
        config(
            &[("ollama", ProviderConfig::new(ProviderKind::Ollama))],
            Some("ollama/qwen2.5:7b"),
        ),
    );
}

#[test]
fn flynn_model_errors_name_the_variable() {
    for (vars, message) in [
        (
            vec![("FLYNN_MODEL", "gpt-4o")],
            "FLYNN_MODEL: invalid model 'gpt-4o' (expected 'provider/model', e.g. 'anthropic/claude-sonnet-4-5')",
        ),
        (
            vec![("FLYNN_MODEL", "gemini/gemini-2.5-pro")],
            "FLYNN_MODEL: provider 'gemini' is not configured and GEMINI_API_KEY is not set, expected GEMINI_API_KEY in the environment or 'gemini' under 'providers'",
        ),
        (
            vec![
                ("FLYNN_MODEL", "antropic/claude-sonnet-4-5"),
                ("ANTHROPIC_API_KEY", "a"),
            ],
            "FLYNN_MODEL: unknown provider 'antropic' (did you mean 'anthropic'?), expected one of the configured providers: anthropic, ollama",
        ),
    ] {
        assert_eq!(
            from_env(&env(&vars)).map_err(|e| e.to_string()),
            Err(message.to_owned()),
            "{vars:?}"
        );
    }
}

#[test]
fn base_urls_from_the_environment_are_checked() {
    assert_eq!(
        from_env(&env(&[("OPENAI_BASE_URL", "localhost:8080")])).map_err(|e| e.to_string()),
        Err("OPENAI_BASE_URL: invalid URL 'localhost:8080', expected an http:// or https:// URL with a host".to_owned())
    );
}

mod with_a_file {
    use std::path::Path;

    use flynn_config::{FromEnv, MapEnv, fill_from_env, parse_str};
    use flynn_protocol::config::{FlynnConfig, ModelRef, ProviderKind};

    fn filled(text: &str, vars: &[(&str, &str)]) -> (FlynnConfig, Vec<String>) {
        let env: MapEnv = vars.iter().copied().collect();
        let mut config = parse_str(text, Path::new("c.yaml"), &env).unwrap();
        let from_env = fill_from_env(&mut config, &env).unwrap();
        (
            config,
            from_env.iter().map(FromEnv::to_string).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn a_file_without_providers_gets_them_and_the_default_tier_from_the_environment() {
        let (config, from_env) = filled(
            "gateway:\n  bind: 127.0.0.1:18800\n",
            &[
                ("OPENAI_API_KEY", "sk-x"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
            ],
        );
        let openai = &config.providers["openai"];
        assert_eq!(
            (
                openai.kind,
                openai.api_key.as_deref(),
                openai.base_url.as_deref()
            ),
            (
                ProviderKind::OpenaiCompatible,
                Some("sk-x"),
                Some("http://127.0.0.1:8080/v1")
            )
        );
        assert_eq!(
            config.models.tiers.default,
            [ModelRef::new("openai", "gpt-4o-mini")]
        );
        assert_eq!(
            from_env,
            [
                "providers.openai.kind from OPENAI_API_KEY, OPENAI_BASE_URL",
                "providers.openai.api_key from OPENAI_API_KEY",
                "providers.openai.base_url from OPENAI_BASE_URL",
                "models.tiers.default from OPENAI_API_KEY, OPENAI_BASE_URL",
            ]
        );
    }

    #[test]
    fn the_file_wins_and_the_environment_fills_only_what_it_leaves_out() {
        let (config, from_env) = filled(
            "providers:\n  openai: {kind: openai, base_url: \"https://api.openai.com/v1\"}\n  claude: {kind: anthropic, api_key: file-key}\n  router: {kind: openrouter}\nmodels:\n  tiers:\n    default: [claude/claude-haiku-4-5]\n    fast: [anthropic/claude-haiku-4-5]\n",
            &[
                ("OPENAI_API_KEY", "sk-env"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
                ("ANTHROPIC_API_KEY", "ant-env"),
                ("OPENROUTER_API_KEY", "or-env"),
            ],
        );
        let get = |name: &str| {
            let p = &config.providers[name];
            (p.api_key.clone(), p.base_url.clone())
        };
        assert_eq!(
            get("openai"),
            (
                Some("sk-env".into()),
                Some("https://api.openai.com/v1".into())
            )
        );
        assert_eq!(get("claude"), (Some("file-key".into()), None));
        assert_eq!(get("router"), (Some("or-env".into()), None));
        // A provider the file does not name (but its models may).
        assert_eq!(get("anthropic"), (Some("ant-env".into()), None));
        assert_eq!(
            config.models.tiers.default,
            [ModelRef::new("claude", "claude-haiku-4-5")]
        );
        assert_eq!(
            from_env,
            [
                "providers.openai.api_key from OPENAI_API_KEY",
                "providers.router.api_key from OPENROUTER_API_KEY",
                "providers.anthropic.kind from ANTHROPIC_API_KEY",
                "providers.anthropic.api_key from ANTHROPIC_API_KEY",
            ]
        );
    }

    #[test]
    fn nothing_in_the_environment_changes_nothing() {
        let text =
            "providers:\n  mybox: {kind: openai-compatible, base_url: \"http://127.0.0.1:9/v1\"}\n";
        let (config, from_env) = filled(text, &[("PATH", "/bin")]);
        assert_eq!(
            config,
            parse_str(text, Path::new("c.yaml"), &MapEnv::new()).unwrap()
        );
        assert!(config.models.tiers.default.is_empty());
        assert_eq!(from_env, Vec::<String>::new());
    }
}
