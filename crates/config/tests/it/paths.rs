//! Where the files are, and `load` choosing between file and environment.

use std::path::{Path, PathBuf};

use flynn_config::{FromEnv, Loaded, MapEnv, Paths, Source, load};
use flynn_protocol::config::{FlynnConfig, ModelRef, ProviderConfig, ProviderKind};

fn env(vars: &[(&str, &str)]) -> MapEnv {
    vars.iter().copied().collect()
}

fn paths(home: &str, config_file: &str) -> Paths {
    Paths {
        home: PathBuf::from(home),
        config_file: PathBuf::from(config_file),
    }
}

#[test]
fn defaults_live_under_home() {
    assert_eq!(
        Paths::resolve(None, &env(&[("HOME", "/home/u")])).unwrap(),
        paths(
            "/home/u/.local/share/flynn",
            "/home/u/.config/flynn/config.yaml"
        )
    );
}

#[test]
fn xdg_directories_win_over_home_when_absolute() {
    let vars = [
        ("HOME", "/home/u"),
        ("XDG_DATA_HOME", "/data"),
        ("XDG_CONFIG_HOME", "/cfg"),
    ];
    assert_eq!(
        Paths::resolve(None, &env(&vars)).unwrap(),
        paths("/data/flynn", "/cfg/flynn/config.yaml")
    );
    let relative = [
        ("HOME", "/home/u"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", ""),
    ];
    assert_eq!(
        Paths::resolve(None, &env(&relative)).unwrap(),
        paths(
            "/home/u/.local/share/flynn",
            "/home/u/.config/flynn/config.yaml"
        )
    );
}

#[test]
fn flynn_variables_win_over_xdg_and_explicit_config_wins_over_all() {
    let vars = [
        ("HOME", "/home/u"),
        ("XDG_DATA_HOME", "/data"),
        ("XDG_CONFIG_HOME", "/cfg"),
        ("FLYNN_HOME", "/srv/flynn"),
        ("FLYNN_CONFIG", "/etc/flynn.yaml"),
    ];
    assert_eq!(
        Paths::resolve(None, &env(&vars)).unwrap(),
        paths("/srv/flynn", "/etc/flynn.yaml")
    );
    assert_eq!(
        Paths::resolve(Some(Path::new("./my.yaml")), &env(&vars)).unwrap(),
        paths("/srv/flynn", "./my.yaml")
    );
}

#[test]
fn no_home_is_an_error_unless_the_flynn_variables_say_where() {
    assert_eq!(
        Paths::resolve(None, &MapEnv::new()).map_err(|e| e.to_string()),
        Err("cannot find a home directory for FLYNN_HOME: HOME is not set, expected HOME or FLYNN_HOME to be set".to_owned())
    );
    assert_eq!(
        Paths::resolve(None, &env(&[("FLYNN_HOME", "/srv/flynn")])).map_err(|e| e.to_string()),
        Err("cannot find a home directory for FLYNN_CONFIG: HOME is not set, expected HOME or FLYNN_CONFIG to be set".to_owned())
    );
    assert_eq!(
        Paths::resolve(Some(Path::new("c.yaml")), &env(&[("FLYNN_HOME", "/srv")])).unwrap(),
        paths("/srv", "c.yaml")
    );
}

#[test]
fn missing_default_file_means_zero_config() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let loaded = load(None, &env(&[("HOME", home), ("GEMINI_API_KEY", "g")])).unwrap();
    let mut expected = FlynnConfig::default();
    expected.providers.insert(
        "gemini".to_owned(),
        ProviderConfig {
            api_key: Some("g".to_owned()),
            ..ProviderConfig::new(ProviderKind::Gemini)
        },
    );
    expected.models.tiers.default = vec![ModelRef::new("gemini", "gemini-2.5-flash")];
    assert_eq!(
        loaded,
        Loaded {
            config: expected,
            source: Source::Environment,
            paths: Paths {
                home: dir.path().join(".local/share/flynn"),
                config_file: dir.path().join(".config/flynn/config.yaml"),
            },
            overlay: None,
            from_env: vec![
                FromEnv {
                    path: "providers.gemini.kind".to_owned(),
                    variables: vec!["GEMINI_API_KEY".to_owned()],
                },
                FromEnv {
                    path: "providers.gemini.api_key".to_owned(),
                    variables: vec!["GEMINI_API_KEY".to_owned()],
                },
                FromEnv {
                    path: "models.tiers.default".to_owned(),
                    variables: vec!["GEMINI_API_KEY".to_owned()],
                },
            ],
            local_fallback: None,
        }
    );
}

#[test]
fn a_named_file_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let vars = [("HOME", "/home/u")];
    assert_eq!(
        load(Some(&missing), &env(&vars)).map_err(|e| e.to_string()),
        Err(format!("{}: no such config file", missing.display()))
    );
    let via_env = [
        ("HOME", "/home/u"),
        ("FLYNN_CONFIG", missing.to_str().unwrap()),
    ];
    assert_eq!(
        load(None, &env(&via_env)).map_err(|e| e.to_string()),
        Err(format!("{}: no such config file", missing.display()))
    );
}

#[test]
fn a_file_is_loaded_and_flynn_model_overrides_its_default_tier() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "providers:\n  local: {kind: openai-compatible, base_url: 'http://127.0.0.1:8080/v1'}\nmodels:\n  tiers:\n    default: [local/qwen2.5]\n",
    )
    .unwrap();
    let vars = [
        ("FLYNN_HOME", "/srv/flynn"),
        ("FLYNN_MODEL", "anthropic/claude-opus-4-6"),
        ("ANTHROPIC_API_KEY", "a"),
    ];
    let loaded = load(Some(&file), &env(&vars)).unwrap();
    assert_eq!(loaded.source, Source::File(file.clone()));
    assert_eq!(
        loaded.config.providers.keys().collect::<Vec<_>>(),
        ["anthropic", "local"]
    );
    assert_eq!(
        loaded.config.models.tiers.default,
        [ModelRef::new("anthropic", "claude-opus-4-6")]
    );

    let unknown = [
        ("FLYNN_HOME", "/srv/flynn"),
        ("FLYNN_MODEL", "loca/qwen2.5"),
    ];
    assert_eq!(
        load(Some(&file), &env(&unknown)).map_err(|e| e.to_string()),
        Err("FLYNN_MODEL: unknown provider 'loca' (did you mean 'local'?), expected one of the configured providers: local, ollama".to_owned())
    );
}

#[test]
fn errors_in_a_loaded_file_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, "agents:\n  max_iteratons: 3\n").unwrap();
    assert_eq!(
        load(Some(&file), &env(&[("FLYNN_HOME", "/srv/flynn")])).map_err(|e| e.to_string()),
        Err(format!(
            "{}:2:3: agents.max_iteratons: unknown key 'max_iteratons' (did you mean 'max_iterations'?), expected one of: primary_tier, max_iterations, system_prompt, default, list, routes, delegation, auto_escalate, max_delegation_depth, subagents, session_access, guest_tools",
            file.display()
        ))
    );
}

/// FLYNN_HOME holds every conversation and the gateway token: made for
/// its owner only; its parents as usual; an existing one left alone.
#[cfg(unix)]
#[test]
fn a_created_home_is_private_and_an_existing_one_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("share/flynn");
    flynn_config::create_home(&home).unwrap();
    flynn_config::create_home(&home).unwrap();
    assert_eq!(mode(&home), 0o700);
    assert_eq!(mode(&dir.path().join("share")), 0o777 & !umask());

    let existing = dir.path().join("mine");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o750)).unwrap();
    flynn_config::create_home(&existing).unwrap();
    assert_eq!(mode(&existing), 0o750);
}

/// The process umask, read from a directory made with 0777.
#[cfg(unix)]
fn umask() -> u32 {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe");
    std::fs::DirBuilder::new()
        .mode(0o777)
        .create(&probe)
        .unwrap();
    !std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777
}

/// A directory with a FLYNN_HOME holding `models/` with these files.
fn home_with_models(files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("flynn/models");
    std::fs::create_dir_all(&models).unwrap();
    for file in files {
        std::fs::write(models.join(file), b"GGUF").unwrap();
    }
    dir
}

#[test]
fn with_no_provider_anywhere_a_model_in_home_serves_every_tier() {
    let dir = home_with_models(&["b.gguf", "a-model.Q4_0.gguf", "c.gguf.part", "notes.txt"]);
    let root = dir.path().to_str().unwrap();
    let home = format!("{root}/flynn");
    let loaded = load(None, &env(&[("HOME", root), ("FLYNN_HOME", &home)])).unwrap();
    let file = dir.path().join("flynn/models/a-model.Q4_0.gguf");
    assert_eq!(loaded.local_fallback, Some(file.clone()));
    let provider = &loaded.config.providers["local"];
    assert_eq!(
        (provider.kind, provider.model_path.as_deref()),
        (ProviderKind::Local, Some(file.as_path()))
    );
    let model = ModelRef::new("local", "a-model.Q4_0");
    let tiers = &loaded.config.models.tiers;
    assert_eq!(
        [&tiers.fast, &tiers.default, &tiers.complex, &tiers.local],
        [
            &vec![model.clone()],
            &vec![model.clone()],
            &vec![model.clone()],
            &vec![model]
        ]
    );

    // A config file with only other blocks: still no provider anywhere.
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "gateway:\n  bind: 127.0.0.1:18801\n").unwrap();
    let loaded = load(
        Some(&config),
        &env(&[("HOME", root), ("FLYNN_HOME", &home)]),
    )
    .unwrap();
    assert_eq!(loaded.local_fallback, Some(file));
}

#[test]
fn flynn_local_model_names_the_file_and_a_provider_turns_the_fallback_off() {
    let dir = home_with_models(&["a.gguf"]);
    let root = dir.path().to_str().unwrap();
    let home = format!("{root}/flynn");
    let other = dir.path().join("elsewhere.gguf");
    std::fs::write(&other, b"GGUF").unwrap();
    let named = env(&[
        ("HOME", root),
        ("FLYNN_HOME", &home),
        ("FLYNN_LOCAL_MODEL", other.to_str().unwrap()),
    ]);
    let loaded = load(None, &named).unwrap();
    assert_eq!(loaded.local_fallback, Some(other.clone()));
    // `config get --origin` names the variable for what it filled in.
    let origins: Vec<(String, String)> = flynn_config::origins(&loaded, "")
        .unwrap()
        .into_iter()
        .filter(|o| o.path.starts_with("providers.local") || o.path.starts_with("models.tiers"))
        .map(|o| (o.path, o.origin.to_string()))
        .collect();
    let from_var = "environment: FLYNN_LOCAL_MODEL".to_owned();
    for path in [
        "providers.local.kind",
        "providers.local.model_path",
        "models.tiers.fast",
        "models.tiers.default",
        "models.tiers.complex",
        "models.tiers.local",
    ] {
        assert!(
            origins.contains(&(path.to_owned(), from_var.clone())),
            "{path} not from FLYNN_LOCAL_MODEL in {origins:?}"
        );
    }
    // A model found in the home is the built-in default.
    let found = load(None, &env(&[("HOME", root), ("FLYNN_HOME", &home)])).unwrap();
    assert!(found.from_env.is_empty(), "{:?}", found.from_env);

    let missing = env(&[
        ("HOME", root),
        ("FLYNN_HOME", &home),
        ("FLYNN_LOCAL_MODEL", "/nonexistent/m.gguf"),
    ]);
    assert_eq!(
        load(None, &missing).map(|_| ()).unwrap_err().to_string(),
        "FLYNN_LOCAL_MODEL: /nonexistent/m.gguf is not a file; expected the path of a GGUF model (flynn models pull <repo>/<file.gguf> downloads one)"
    );

    let keyed = env(&[
        ("HOME", root),
        ("FLYNN_HOME", &home),
        ("GEMINI_API_KEY", "g"),
    ]);
    let loaded = load(None, &keyed).unwrap();
    assert_eq!(loaded.local_fallback, None);
    assert!(!loaded.config.providers.contains_key("local"));

    // No model in the home: no fallback, the config is left as it was.
    let empty = tempfile::tempdir().unwrap();
    let root = empty.path().to_str().unwrap();
    let loaded = load(None, &env(&[("HOME", root)])).unwrap();
    assert_eq!(loaded.local_fallback, None);
    assert_eq!(loaded.config, FlynnConfig::default());
}

#[test]
fn a_local_provider_is_checked_when_the_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "providers:\n  mine:\n    kind: local\n    model_path: /nonexistent/m.gguf\n    threads: 0\n  cloud:\n    kind: openai\n    context: 4096\n",
    )
    .unwrap();
    let root = dir.path().to_str().unwrap();
    let error = load(Some(&config), &env(&[("HOME", root)]))
        .map(|_| ())
        .unwrap_err();
    let text = error.to_string();
    for expected in [
        "providers.mine.model_path: model file /nonexistent/m.gguf does not exist; download a GGUF model with `flynn models pull <repo>/<file.gguf>` (or scripts/fetch-smollm2.sh) and set model_path to the path it prints",
        "providers.mine.threads:",
        "providers.cloud.context: context is only for providers of kind local (this one is openai)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}
