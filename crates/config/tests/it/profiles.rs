//! Profile overlays: `profiles/<name>.overlay.yaml` merged over the file.

use flynn_config::{MapEnv, Overlay, load};
use flynn_protocol::config::ModelRef;

const BASE: &str = "\
# my Flynn
providers:
  local: { kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }
  cloud: { kind: openai, api_key: sk-base }
models:
  tiers:
    default: [local/qwen2.5]
    fast: [local/qwen2.5]
gateway:
  bind: 127.0.0.1:18800
  rate_limit_per_minute: 600
";

/// A config dir with the base file and these overlays.
fn dir_with(overlays: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), BASE).unwrap();
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    for (name, text) in overlays {
        std::fs::write(
            dir.path().join(format!("profiles/{name}.overlay.yaml")),
            text,
        )
        .unwrap();
    }
    dir
}

fn env_for(dir: &tempfile::TempDir, profile: Option<&str>) -> MapEnv {
    let mut env = MapEnv::new()
        .with("HOME", dir.path().to_str().unwrap())
        .with(
            "FLYNN_CONFIG",
            dir.path().join("config.yaml").to_str().unwrap(),
        );
    if let Some(profile) = profile {
        env.set("FLYNN_PROFILE", profile);
    }
    env
}

#[test]
fn an_overlay_merges_maps_key_by_key_and_replaces_lists_and_scalars() {
    let dir = dir_with(&[(
        "work",
        "# the work laptop\nmodels:\n  tiers:\n    default: [cloud/gpt-4o]\ngateway:\n  bind: 0.0.0.0:18800\n  token: s3cret-token-of-work-0123456789abcdef\n",
    )]);
    let loaded = load(None, &env_for(&dir, Some("work"))).unwrap();
    let config = &loaded.config;
    // Replaced by the overlay.
    assert_eq!(
        config.models.tiers.default,
        vec![ModelRef::new("cloud", "gpt-4o")]
    );
    assert_eq!(config.gateway.bind, "0.0.0.0:18800");
    assert_eq!(
        config.gateway.token.as_deref(),
        Some("s3cret-token-of-work-0123456789abcdef")
    );
    // Kept from the file: siblings the overlay does not name.
    assert_eq!(
        config.models.tiers.fast,
        vec![ModelRef::new("local", "qwen2.5")]
    );
    assert_eq!(config.gateway.rate_limit_per_minute, 600);
    assert_eq!(config.providers.len(), 2);
    assert_eq!(
        loaded.overlay,
        Some(Overlay {
            profile: "work".to_owned(),
            file: dir.path().join("profiles/work.overlay.yaml"),
        })
    );

    // Without the variable the file alone counts.
    let plain = load(None, &env_for(&dir, None)).unwrap();
    assert_eq!(plain.overlay, None);
    assert_eq!(plain.config.gateway.bind, "127.0.0.1:18800");
}

#[test]
fn a_problem_in_the_overlay_names_the_overlay_file_and_its_line() {
    let dir = dir_with(&[(
        "typo",
        "# line 1\nmodels:\n  tiers:\n    default: [clod/gpt-4o]\n",
    )]);
    let error = load(None, &env_for(&dir, Some("typo"))).unwrap_err();
    let text = error.to_string();
    let overlay = dir.path().join("profiles/typo.overlay.yaml");
    assert!(
        text.starts_with(&format!("{}:4:", overlay.display())),
        "{text}"
    );
    assert!(text.contains("unknown provider 'clod'"), "{text}");
    assert!(text.contains("did you mean 'cloud'"), "{text}");

    // An unknown key in the overlay, and a syntax error, likewise.
    let dir = dir_with(&[
        ("unknown", "gateway:\n  bnd: x\n"),
        ("broken", "gateway: [\n"),
    ]);
    let text = load(None, &env_for(&dir, Some("unknown")))
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(&format!(
            "{}:2:3: gateway.bnd",
            dir.path().join("profiles/unknown.overlay.yaml").display()
        )),
        "{text}"
    );
    let text = load(None, &env_for(&dir, Some("broken")))
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(
            &dir.path()
                .join("profiles/broken.overlay.yaml")
                .display()
                .to_string()
        ),
        "{text}"
    );
    // A problem in the file itself still names the file.
    std::fs::write(
        dir.path().join("config.yaml"),
        BASE.replace("rate_limit_per_minute: 600", "rate_limit_per_minute: nope"),
    )
    .unwrap();
    let text = load(None, &env_for(&dir, Some("unknown")))
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(&format!("{}:11:", dir.path().join("config.yaml").display())),
        "{text}"
    );
}

#[test]
fn a_missing_or_badly_named_profile_is_refused_with_the_profiles_there_are() {
    let dir = dir_with(&[("work", "{}\n"), ("home", "gateway: {}\n")]);
    let text = load(None, &env_for(&dir, Some("wrk")))
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with("profile 'wrk': no overlay file "),
        "{text}"
    );
    assert!(text.ends_with("expected one of: home, work"), "{text}");
    let text = load(None, &env_for(&dir, Some("../etc")))
        .unwrap_err()
        .to_string();
    assert_eq!(
        text,
        "profile '../etc': invalid profile name, expected letters, digits, '-' and '_'"
    );
    // An empty overlay changes nothing.
    let loaded = load(None, &env_for(&dir, Some("work"))).unwrap();
    assert_eq!(loaded.config.gateway.bind, "127.0.0.1:18800");

    // No config file at all: nothing to overlay.
    let empty = tempfile::tempdir().unwrap();
    let env = MapEnv::new()
        .with("HOME", empty.path().to_str().unwrap())
        .with("FLYNN_PROFILE", "work");
    let text = load(None, &env).unwrap_err().to_string();
    assert!(
        text.contains("there is no config file to overlay"),
        "{text}"
    );
}
