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
        assert_eq!(
            stdout(&output),
            "SmolLM2-135M-Instruct.Q4_1.gguf  llama  98.4 MB  context 8192\n"
        );
        let output = env.run(&["doctor"]);
        let text = stdout(&output);
        assert!(
            text.contains(
                "local (local): SmolLM2-135M-Instruct.Q4_1.gguf, llama, 98.4 MB, context 8192"
            ),
            "{text}"
        );
    }
}
