use serde_json::Value;

use crate::{Env, stderr, stdout};

#[test]
fn an_invalid_config_exits_2_with_line_and_column() {
    let env = Env::new();
    let path = env.path().join("config.yaml");
    std::fs::write(
        &path,
        "providers:\n  local:\n    kind: openai-compatible\n    base_url: http://127.0.0.1:1/v1\n    api_kye: x\n",
    )
    .unwrap();
    let output = env.run(&["send", "--config", path.to_str().unwrap(), "hello"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.starts_with(&format!(
            "error: {}:5:5: providers.local.api_kye: ",
            path.display()
        )),
        "{message}"
    );
    assert!(message.contains("did you mean 'api_key'?"), "{message}");

    let output = env.run(&["config", "validate", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stderr(&output), message);
}

#[test]
fn a_valid_config_validates() {
    let env = Env::new();
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        "providers:\n  local: { kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }\nmodels:\n  tiers:\n    default: [local/qwen2.5]\n",
    )
    .unwrap();
    let output = env.run(&["config", "validate", path.to_str().unwrap()]);
    assert_eq!(
        (output.status.code(), stdout(&output)),
        (Some(0), format!("{}: ok\n", path.display()))
    );
}

#[test]
fn a_named_config_file_that_is_missing_is_an_error() {
    let env = Env::new();
    let output = env.run(&["send", "--config", "/nonexistent/flynn.yaml", "hi"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (
            Some(2),
            "error: /nonexistent/flynn.yaml: no such config file\n"
        )
    );
}

#[test]
fn config_schema_prints_the_generated_schema() {
    let output = Env::new().run(&["config", "schema"]);
    assert_eq!(output.status.code(), Some(0));
    let schema: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(schema["title"], "Flynn configuration");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/flynn.schema.json"
    ))
    .unwrap();
    assert_eq!(stdout(&output), committed);
}

#[test]
fn version_prints_the_crate_version() {
    let output = Env::new().run(&["--version"]);
    assert_eq!(
        (output.status.code(), stdout(&output)),
        (Some(0), format!("flynn {}\n", env!("CARGO_PKG_VERSION")))
    );
}

#[test]
fn sandbox_prints_which_sandbox_runs_commands() {
    let env = Env::new();
    let workspace = env.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        format!(
            "providers:\n  local: {{ kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }}\n\
             models:\n  tiers:\n    default: [local/qwen2.5]\n\
             tools:\n  workspace: {}\n  sandbox:\n    mode: none\n",
            workspace.display()
        ),
    )
    .unwrap();
    let output = env.run(&["sandbox", "--config", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = stdout(&output);
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(
        lines[..6],
        [
            "sandbox: none (tools.sandbox.mode: none)",
            "network: not restricted (no sandbox)",
            "readable: everything Flynn's user may read",
            "writable: everything Flynn's user may write",
            "environment: cleared: only basic variables (PATH, HOME, LANG, TERM, TZ...) pass; \
             tools.env adds none",
            "backends:",
        ]
    );
    let backends: Vec<&str> = lines[6..10]
        .iter()
        .map(|line| line.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(backends, ["bubblewrap", "docker", "landlock", "none"]);
    assert_eq!(
        lines[9],
        "  none        active: commands run unrestricted, as Flynn's user"
    );
    assert_eq!(
        lines[10..],
        [format!(
            "workspace: {} (tools.workspace)",
            workspace.display()
        )]
    );

    // A sandbox the host lacks: the report says why, and the exit code is 2.
    std::fs::write(
        &path,
        "providers:\n  local: { kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }\n\
         models:\n  tiers:\n    default: [local/qwen2.5]\n\
         tools:\n  sandbox:\n    mode: docker\n",
    )
    .unwrap();
    let output = env.run(&["sandbox", "--config", path.to_str().unwrap()]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (Some(2), "")
    );
    let report = stdout(&output);
    let (first, rest) = report.split_once('\n').unwrap();
    assert!(
        first.starts_with("sandbox: none can run: tools.sandbox.mode is docker, but ")
            && first.ends_with(
                "; start the Docker engine (or install Docker) or set tools.sandbox.mode to \
                 auto, bubblewrap or landlock"
            ),
        "{report}"
    );
    assert!(
        rest.starts_with("network: no command can run\nbackends:\n"),
        "{report}"
    );
    // Run from the home directory, `flynn send` would not work there.
    let workspace = env.path().join("home/workspace");
    assert!(
        report.ends_with(&format!(
            "\nworkspace: {ws} (FLYNN_HOME/workspace, the default)\n  \
             for `flynn send` without a daemon: the current directory {cwd} is your home \
             directory, so tools work in {ws} instead (set tools.workspace to choose)\n  \
             set tools.workspace to choose another directory\n",
            ws = workspace.display(),
            cwd = env.path().display()
        )),
        "{report}"
    );
}

#[test]
fn completion_scripts_name_every_command_and_bash_parses_its_own() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = env.run(&["completion", shell]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{shell}: {}",
            stderr(&output)
        );
        let script = stdout(&output);
        for command in ["send", "sessions", "memory", "usage", "completion"] {
            assert!(script.contains(command), "{shell} script lacks {command}");
        }
    }
    let script = env.path().join("flynn.bash");
    std::fs::write(&script, stdout(&env.run(&["completion", "bash"]))).unwrap();
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let unknown = env.run(&["completion", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("invalid value 'tcsh'"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn config_get_prints_values_with_defaults_filled_and_secrets_masked() {
    let env = Env::new().var("MY_KEY", "sk-very-secret");
    let file = env.path().join("flynn.yaml");
    std::fs::write(
        &file,
        "providers:\n  openai: {kind: openai, api_key: \"${MY_KEY}\"}\nmodels:\n  tiers:\n    default: [openai/gpt-4o-mini]\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let get = |path: &str| env.run(&["config", "get", path, "--config", &file]);

    assert_eq!(
        stdout(&get("models.tiers.default.0")),
        "openai/gpt-4o-mini\n"
    );
    assert_eq!(stdout(&get("providers.openai.api_key")), "****\n");
    assert_eq!(stdout(&get("memory.max_context_tokens")), "2000\n");
    let whole = stdout(&env.run(&["config", "get", "--config", &file]));
    assert!(!whole.contains("sk-very-secret"), "{whole}");
    let memory: Value = serde_json::from_str(&stdout(&get("memory"))).unwrap();
    assert_eq!(memory["auto_extract"], true);

    let wrong = get("memroy.dir");
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        stderr(&wrong).contains("no key 'memroy' at the top, expected one of:"),
        "{}",
        stderr(&wrong)
    );
    let past = get("models.tiers.default.3");
    assert!(
        stderr(&past)
            .contains("'models.tiers.default' has 1 item; there is no item 3 (items count from 0)"),
        "{}",
        stderr(&past)
    );
}

const LOCAL: &str = "# my config\nproviders:\n  local: { kind: openai-compatible, base_url: \"http://127.0.0.1:8080/v1\" }\nmodels:\n  tiers:\n    default: [local/qwen2.5]  # the small one\ngateway:\n  bind: 127.0.0.1:18800\n";

#[test]
fn config_migrate_writes_the_version_keeps_a_backup_and_is_idempotent() {
    let env = Env::new();
    let path = env.path().join("flynn.yaml");
    std::fs::write(&path, LOCAL).unwrap();
    let file = path.to_str().unwrap();

    let dry = env.run(&["config", "migrate", "--dry-run", "--config", file]);
    assert_eq!(
        (dry.status.code(), stdout(&dry)),
        (
            Some(0),
            format!(
                "{file}: would migrate from version 1 to 1\n  wrote version: 1 (the file had none)\n"
            )
        )
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), LOCAL);

    let output = env.run(&["config", "migrate", "--config", file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "{file}: migrated from version 1 to 1\n  wrote version: 1 (the file had none)\nthe old file is kept as {file}.v1.bak\n"
        )
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        LOCAL.replacen("# my config\n", "# my config\nversion: 1\n", 1)
    );
    assert_eq!(
        std::fs::read_to_string(format!("{file}.v1.bak")).unwrap(),
        LOCAL
    );

    let again = env.run(&["config", "migrate", "--config", file]);
    assert_eq!(
        stdout(&again),
        format!("{file}: already version 1, nothing to do\n")
    );

    // A file from a newer Flynn is refused and left alone.
    std::fs::write(&path, "version: 9\n").unwrap();
    let newer = env.run(&["config", "migrate", "--config", file]);
    assert_eq!(newer.status.code(), Some(2));
    assert_eq!(
        stderr(&newer),
        "error: cannot migrate the config: the file is version 9, newer than this Flynn's 1; upgrade Flynn instead\n"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "version: 9\n");
}

#[test]
fn a_profile_overlay_is_merged_over_the_file_by_flag_or_variable() {
    let env = Env::new();
    let path = env.path().join("flynn.yaml");
    std::fs::write(&path, LOCAL).unwrap();
    std::fs::create_dir(env.path().join("profiles")).unwrap();
    std::fs::write(
        env.path().join("profiles/public.overlay.yaml"),
        "gateway:\n  bind: 0.0.0.0:18800\n  token: a-long-enough-secret-token-0123456789\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let get = |env: &Env, extra: &[&str]| {
        let mut args = vec!["config", "get", "gateway.bind", "--config", file];
        args.extend_from_slice(extra);
        stdout(&env.run(&args))
    };
    assert_eq!(get(&env, &[]), "127.0.0.1:18800\n");
    assert_eq!(get(&env, &["--profile", "public"]), "0.0.0.0:18800\n");
    let by_var = Env::new().var("FLYNN_PROFILE", "public");
    assert_eq!(get(&by_var, &[]), "0.0.0.0:18800\n");
    // The flag wins over the variable.
    let both = Env::new().var("FLYNN_PROFILE", "nope");
    assert_eq!(get(&both, &["--profile", "public"]), "0.0.0.0:18800\n");
    let token = env.run(&[
        "config",
        "get",
        "gateway.token",
        "--config",
        file,
        "--profile",
        "public",
    ]);
    assert_eq!(stdout(&token), "****\n");

    let validate = env.run(&["--profile", "public", "config", "validate", file]);
    assert_eq!(
        stdout(&validate),
        format!(
            "{file} with profile public ({}): ok\n",
            env.path().join("profiles/public.overlay.yaml").display()
        )
    );
    let missing = env.run(&["--profile", "pubic", "config", "validate", file]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).ends_with("expected one of: public\n"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn token_create_keeps_the_secret_out_of_the_config_and_list_never_shows_it() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new().var("OPS_TOKEN", "ops-0123456789abcdef0123456789abcdef");
    let path = env.path().join("config.yaml");
    // An entry whose secret comes from the environment stays that way.
    std::fs::write(
        &path,
        "gateway:\n  tokens:\n    - {name: ops, token: \"${OPS_TOKEN}\", scopes: [read]}\n",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let output = env.run(&[
        "token", "create", "--config", config, "--name", "ide", "--scope", "chat",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let secret = stdout(&output).trim().to_owned();
    assert_eq!(secret.len(), 64, "{secret}");
    assert!(secret.chars().all(|c| c.is_ascii_hexdigit()));
    let file = env.path().join("home/tokens/ide.token");
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), secret);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&secret), "{text}");
    assert!(
        text.contains("${OPS_TOKEN}"),
        "not expanded into the file: {text}"
    );
    assert!(text.contains("ide.token"), "{text}");

    let listed = env.run(&["token", "list", "--config", config]);
    assert_eq!(
        (listed.status.code(), stdout(&listed)),
        (
            Some(0),
            format!(
                "default  admin  (FLYNN_GATEWAY_TOKEN or FLYNN_HOME/gateway.token)\nops  read  (in the config)\nide  chat  ({})\n",
                file.display()
            )
        )
    );
    // Again: the token is replaced, not added twice.
    let again = env.run(&[
        "token", "create", "--config", config, "--name", "ide", "--scope", "chat", "--scope",
        "read",
    ]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_ne!(stdout(&again).trim(), secret);
    let listed = stdout(&env.run(&["token", "list", "--config", config]));
    assert!(listed.contains("ide  chat,read"), "{listed}");
    assert_eq!(listed.lines().count(), 3, "{listed}");

    let revoked = env.run(&["token", "revoke", "--config", config, "--name", "ide"]);
    assert_eq!(revoked.status.code(), Some(0), "{}", stderr(&revoked));
    assert!(!file.exists());
    let listed = stdout(&env.run(&["token", "list", "--config", config]));
    assert!(!listed.contains("ide"), "{listed}");
    let bad = env.run(&[
        "token", "create", "--config", config, "--name", "x", "--scope", "root",
    ]);
    assert_eq!(
        (bad.status.code(), stderr(&bad).as_str()),
        (
            Some(2),
            "error: unknown scope 'root' (expected chat, read, approve or admin)\n"
        )
    );
}

#[test]
fn config_get_origin_says_file_line_environment_or_default() {
    let env = Env::new()
        .var("OPENAI_API_KEY", "sk-from-env")
        .var("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    let path = env.path().join("flynn.yaml");
    std::fs::write(
        &path,
        "gateway:\n  bind: 127.0.0.1:18801\nproviders:\n  openai:\n    kind: openai\n    base_url: https://api.openai.com/v1\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let output = env.run(&[
        "config",
        "get",
        "providers.openai",
        "--origin",
        "--config",
        file,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "providers.openai.api_key: ****  (environment: OPENAI_API_KEY)\n\
             providers.openai.base_url: https://api.openai.com/v1  ({file}:6)\n\
             providers.openai.connect_timeout_secs: 10  (default)\n\
             providers.openai.kind: openai  ({file}:5)\n\
             providers.openai.read_timeout_secs: 120  (default)\n"
        )
    );
    let output = env.run(&[
        "config",
        "get",
        "models.tiers.default",
        "--origin",
        "--config",
        file,
    ]);
    assert_eq!(
        stdout(&output),
        "models.tiers.default: [\"openai/gpt-4o-mini\"]  (environment: OPENAI_API_KEY)\n"
    );
    let output = env.run(&[
        "config",
        "get",
        "gateway.bind",
        "--origin",
        "--config",
        file,
    ]);
    assert_eq!(
        stdout(&output),
        format!("gateway.bind: 127.0.0.1:18801  ({file}:2)\n")
    );
    // Without --origin, the value alone, as scripts read it.
    let output = env.run(&["config", "get", "gateway.bind", "--config", file]);
    assert_eq!(stdout(&output), "127.0.0.1:18801\n");
}
