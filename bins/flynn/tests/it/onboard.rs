//! `flynn onboard` writes a config that Flynn then runs with.

use std::io::Write;
use std::process::Stdio;

use flynn_testkit::{FakeOpenAi, Reply};

use crate::{Env, stderr, stdout};

#[tokio::test]
async fn a_non_interactive_onboard_writes_a_config_that_answers() {
    let fake = FakeOpenAi::start_with_key("sk-test").await;
    let env = Env::new().var("MY_KEY", "sk-test");
    let output = env.run(&[
        "onboard",
        "--non-interactive",
        "--provider",
        "openai-compatible",
        "--base-url",
        &fake.base_url(),
        "--model",
        "gpt-4o-mini",
        "--api-key-env",
        "MY_KEY",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let file = env.path().join("config/flynn/config.yaml");
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!(
            "wrote {}\nchecked: {}/models answered in ",
            file.display(),
            fake.base_url()
        )),
        "{text}"
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("    api_key: ${MY_KEY}\n"), "{written}");
    assert!(
        written.contains("    default: [\"local/gpt-4o-mini\"]\n"),
        "{written}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    // Flynn runs with it.
    fake.push(Reply::Text("Set up and answering.".into()));
    let send = env.run(&["send", "hello"]);
    assert_eq!(
        (send.status.code(), stdout(&send)),
        (Some(0), "Set up and answering.\n".to_owned()),
        "{}",
        stderr(&send)
    );
    assert_eq!(fake.violations(), Vec::<String>::new());

    // A second run does not overwrite it without --force.
    let again = env.run(&["onboard", "--non-interactive", "--provider", "ollama"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("exists already"),
        "{}",
        stderr(&again)
    );
    let forced = env.run(&[
        "onboard",
        "--non-interactive",
        "--provider",
        "ollama",
        "--force",
        "--no-check",
    ]);
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("kind: ollama")
    );
    let backup = file.with_file_name("config.yaml.bak");
    assert_eq!(std::fs::read_to_string(backup).unwrap(), written);
}

#[test]
fn interactive_answers_from_a_pipe_and_bad_flags_are_explained() {
    let env = Env::new();
    let mut child = env
        .command(&["onboard", "--no-check"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"anthropic\n\nclaude-opus-4-1\n\n\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let prompts = stderr(&output);
    assert!(
        prompts.contains("Provider (number or name) [anthropic]: "),
        "{prompts}"
    );
    assert!(prompts.contains("(not set in this shell yet)"), "{prompts}");
    let file = env.path().join("config/flynn/config.yaml");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("api_key: ${ANTHROPIC_API_KEY}"),
        "{written}"
    );
    assert!(
        written.contains("default: [\"anthropic/claude-opus-4-1\"]"),
        "{written}"
    );
    assert!(
        written.contains("fast: [\"anthropic/claude-haiku-4-5\"]"),
        "{written}"
    );
    // The file validates once the key is in the environment.
    let validate = Env::new()
        .var("ANTHROPIC_API_KEY", "k")
        .var("FLYNN_CONFIG", file.to_str().unwrap())
        .run(&["config", "validate"]);
    assert_eq!(validate.status.code(), Some(0), "{}", stderr(&validate));

    let unknown = Env::new().run(&["onboard", "--non-interactive", "--provider", "antropic"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown)
            .starts_with("error: unknown provider 'antropic', expected one of: anthropic, openai,"),
        "{}",
        stderr(&unknown)
    );
    let nothing = Env::new().run(&["onboard", "--non-interactive"]);
    assert_eq!(nothing.status.code(), Some(2));
    assert!(
        stderr(&nothing).contains("no provider: give --provider"),
        "{}",
        stderr(&nothing)
    );
    let no_url = Env::new().run(&[
        "onboard",
        "--non-interactive",
        "--provider",
        "openai-compatible",
        "--model",
        "m",
    ]);
    assert!(
        stderr(&no_url).contains("--base-url is needed"),
        "{}",
        stderr(&no_url)
    );
}
