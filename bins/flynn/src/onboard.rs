//! `flynn onboard`: a guided set-up that writes a valid config file.
//!
//! Interactive by default: questions on stderr, answers from stdin (a
//! terminal or a pipe), each with a default taken from the environment.
//! `--non-interactive` takes everything from flags and the environment, for
//! scripts and provisioning.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use flynn_core::config::{self, Env};
use flynn_core::protocol::config::{ProviderConfig, ProviderKind};

use crate::cli::OnboardArgs;
use crate::env::CliEnv;
use crate::exit::Failure;

/// What the file will say.
#[derive(Debug, Clone, PartialEq)]
struct Answers {
    kind: ProviderKind,
    /// The provider's name in the file.
    name: String,
    base_url: Option<String>,
    key: Key,
    model: String,
    fast_model: Option<String>,
    bind: String,
}

/// Where the provider's key comes from.
#[derive(Debug, Clone, PartialEq)]
enum Key {
    None,
    /// `${VAR}`: read from the environment at every start.
    Env(String),
    /// Written into the file (which is then private to its owner).
    Literal(String),
}

const DEFAULT_BIND: &str = "127.0.0.1:18800";

/// The providers offered, in the order asked.
const OFFERED: [ProviderKind; 9] = [
    ProviderKind::Anthropic,
    ProviderKind::Openai,
    ProviderKind::Gemini,
    ProviderKind::Ollama,
    ProviderKind::Openrouter,
    ProviderKind::Groq,
    ProviderKind::Llamacpp,
    ProviderKind::Lmstudio,
    ProviderKind::OpenaiCompatible,
];

/// The suggested default and fast models of a kind.
fn suggested_models(kind: ProviderKind) -> (Option<&'static str>, Option<&'static str>) {
    match kind {
        ProviderKind::Anthropic => (Some("claude-sonnet-4-5"), Some("claude-haiku-4-5")),
        ProviderKind::Openai => (Some("gpt-4o"), Some("gpt-4o-mini")),
        ProviderKind::Gemini => (Some("gemini-2.5-flash"), Some("gemini-2.5-flash-lite")),
        ProviderKind::Ollama => (Some("llama3.2"), None),
        ProviderKind::Openrouter => (Some("anthropic/claude-sonnet-4.5"), None),
        ProviderKind::Groq => (
            Some("llama-3.3-70b-versatile"),
            Some("llama-3.1-8b-instant"),
        ),
        _ => (None, None),
    }
}

/// The provider's name in the file: the kind, or `local` for a generic
/// local server.
fn provider_name(kind: ProviderKind) -> String {
    match kind {
        ProviderKind::OpenaiCompatible
        | ProviderKind::Llamacpp
        | ProviderKind::Vllm
        | ProviderKind::Lmstudio => "local".to_owned(),
        ProviderKind::GithubModels => "github".to_owned(),
        other => other.as_str().to_owned(),
    }
}

fn parse_kind(text: &str) -> Option<ProviderKind> {
    let text = text.trim().to_ascii_lowercase();
    // A local model is set up with `flynn models pull`, not here.
    ProviderKind::ALL
        .into_iter()
        .filter(|k| *k != ProviderKind::Local)
        .find(|k| k.as_str() == text)
}

/// The provider the environment points at: the one zero-config would put
/// first on the default tier.
fn detected_kind(env: &dyn Env) -> Option<ProviderKind> {
    let config = config::from_env(env).ok()?;
    let first = config.models.tiers.default.first()?;
    config.providers.get(first.provider()).map(|p| p.kind)
}

pub async fn run(args: OnboardArgs) -> Result<(), Failure> {
    let paths = config::Paths::resolve(args.config.as_deref(), &CliEnv)?;
    let file = paths.config_file;
    if file.exists() && !args.force {
        return Err(Failure::usage(format!(
            "{} exists already; `flynn config set` changes one value, or run `flynn onboard --force` to replace it (the old file is kept as {}.bak)",
            file.display(),
            file.display()
        )));
    }
    let answers = if args.non_interactive {
        from_flags(&args, &CliEnv)?
    } else {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let mut prompts = std::io::stderr();
        ask(&args, &CliEnv, &mut input, &mut prompts)?
    };
    let text = render(&answers);
    // Validate as Flynn will read it; a `${VAR}` not set in this shell is
    // still a valid reference.
    let check_env = FilledEnv(&answers);
    let loaded = config::parse_str(&text, &file, &check_env).map_err(|e| {
        Failure::other(format!(
            "the config onboard wrote is not valid (a bug): {e}"
        ))
    })?;
    write_private(&file, &text, args.force)?;
    outln!("wrote {}", file.display());

    if !args.no_check {
        check(&answers, &loaded).await;
    }
    outln!(
        "next: flynn send \"hello\"   (or `flynn start` for the daemon; `flynn doctor` checks everything)"
    );
    Ok(())
}

/// The environment used to validate the new file: the process's, with the
/// key variable filled in when it is not set here.
struct FilledEnv<'a>(&'a Answers);

impl Env for FilledEnv<'_> {
    fn var(&self, name: &str) -> Option<String> {
        match &self.0.key {
            Key::Env(var) if var == name => {
                CliEnv.var(name).or_else(|| Some("set-later".to_owned()))
            }
            _ => CliEnv.var(name),
        }
    }
}

fn from_flags(args: &OnboardArgs, env: &dyn Env) -> Result<Answers, Failure> {
    let kind = match &args.provider {
        Some(text) => parse_kind(text).ok_or_else(|| unknown_kind(text))?,
        None => detected_kind(env).ok_or_else(|| {
            Failure::usage(
                "no provider: give --provider (anthropic, openai, gemini, ollama, ...) or set ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or OLLAMA_HOST",
            )
        })?,
    };
    let (model, fast) = suggested_models(kind);
    let model = args
        .model
        .clone()
        .or(model.map(str::to_owned))
        .ok_or_else(|| {
            Failure::usage(format!("--model is needed for a provider of kind {kind}"))
        })?;
    let base_url = args.base_url.clone().or_else(|| default_base(kind, env));
    if base_url.is_none() && kind.default_base_url().is_none() && kind != ProviderKind::Bedrock {
        return Err(Failure::usage(format!(
            "--base-url is needed for a provider of kind {kind} (e.g. http://127.0.0.1:8080/v1)"
        )));
    }
    let key = match (&args.api_key_env, kind.api_key_env()) {
        (Some(var), _) => Key::Env(var.clone()),
        (None, Some(var)) => Key::Env(var.to_owned()),
        (None, None) => Key::None,
    };
    Ok(Answers {
        kind,
        name: provider_name(kind),
        base_url,
        key,
        model,
        fast_model: args.fast_model.clone().or(fast.map(str::to_owned)),
        bind: args.bind.clone().unwrap_or_else(|| DEFAULT_BIND.to_owned()),
    })
}

fn unknown_kind(text: &str) -> Failure {
    let kinds: Vec<&str> = ProviderKind::ALL
        .iter()
        .filter(|k| **k != ProviderKind::Local)
        .map(|k| k.as_str())
        .collect();
    Failure::usage(format!(
        "unknown provider '{text}', expected one of: {}",
        kinds.join(", ")
    ))
}

/// The base URL to write: `OLLAMA_HOST` for Ollama, read as zero-config
/// reads it, else none (the kind's default applies).
fn default_base(kind: ProviderKind, env: &dyn Env) -> Option<String> {
    if kind != ProviderKind::Ollama {
        return None;
    }
    let config = config::from_env(env).ok()?;
    config.providers.get("ollama")?.base_url.clone()
}

/// Questions on `out`, answers from `input`.
struct Prompter<'a> {
    input: &'a mut dyn BufRead,
    out: &'a mut dyn Write,
}

impl Prompter<'_> {
    fn say(&mut self, text: &str) {
        let _ = writeln!(self.out, "{text}");
    }

    /// One answer; empty takes the default. The end of input takes the
    /// default too, or fails when there is none.
    fn question(&mut self, text: &str, default: Option<&str>) -> Result<String, Failure> {
        match default {
            Some(default) => {
                let _ = write!(self.out, "{text} [{default}]: ");
            }
            None => {
                let _ = write!(self.out, "{text}: ");
            }
        }
        let _ = self.out.flush();
        let mut line = String::new();
        let read = self
            .input
            .read_line(&mut line)
            .map_err(|e| Failure::other(format!("cannot read the answer: {e}")))?;
        if read == 0 {
            let _ = writeln!(self.out);
            return match default {
                Some(default) => Ok(default.to_owned()),
                None => Err(Failure::usage(format!(
                    "no answer to \"{text}\" (stdin ended); use --non-interactive with flags in scripts"
                ))),
            };
        }
        let answer = line.trim();
        Ok(if answer.is_empty() {
            default.unwrap_or_default().to_owned()
        } else {
            answer.to_owned()
        })
    }
}

/// Asks each question in turn; an empty answer takes the default.
fn ask(
    args: &OnboardArgs,
    env: &dyn Env,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<Answers, Failure> {
    let mut p = Prompter { input, out };
    p.say("Flynn set-up: a few questions, Enter takes the [default].");
    let detected = args
        .provider
        .as_deref()
        .and_then(parse_kind)
        .or_else(|| detected_kind(env))
        .unwrap_or(ProviderKind::Anthropic);
    let mut menu = String::from("Model provider:");
    for (index, kind) in OFFERED.iter().enumerate() {
        menu.push_str(&format!(" {}) {kind}", index + 1));
    }
    p.say(&menu);
    let kind = loop {
        let answer = p.question("Provider (number or name)", Some(detected.as_str()))?;
        let chosen = answer
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| OFFERED.get(i).copied())
            .or_else(|| parse_kind(&answer));
        match chosen {
            Some(kind) => break kind,
            None => {
                p.say(&format!("  '{answer}' is not one of the providers above."));
            }
        }
    };

    let base_default =
        default_base(kind, env).or_else(|| kind.default_base_url().map(str::to_owned));
    let base_url = if kind.default_base_url().is_none() || kind.is_self_hosted() {
        let answer = loop {
            let answer = p.question("Server URL", base_default.as_deref())?;
            if answer.starts_with("http://") || answer.starts_with("https://") {
                break answer;
            }
            p.say("  expected an http:// or https:// URL, like http://127.0.0.1:8080/v1");
        };
        (Some(answer.as_str()) != kind.default_base_url()).then_some(answer)
    } else {
        None
    };

    let key = match kind.api_key_env() {
        Some(var) => {
            let set = env.var(var).is_some_and(|v| !v.trim().is_empty());
            p.say(&format!("API key: Enter to read it from ${var} at every start{}, or paste a key to store it in the file (made private to you).",
                if set {
                    " (set in this shell)"
                } else {
                    " (not set in this shell yet)"
                }
            ));
            let answer = p.question("Key", Some(&format!("${var}")))?;
            if answer == format!("${var}") || answer.is_empty() {
                Key::Env(var.to_owned())
            } else if let Some(other) = answer.strip_prefix('$') {
                Key::Env(other.trim_matches(['{', '}']).to_owned())
            } else {
                Key::Literal(answer)
            }
        }
        None => Key::None,
    };

    let (model_default, fast_default) = suggested_models(kind);
    let model = loop {
        let answer = p.question("Model for everyday answers", model_default)?;
        if !answer.is_empty() {
            break answer;
        }
        p.say("  a model name is needed, e.g. qwen2.5-7b-instruct");
    };
    let fast = p.question(
        "Cheaper model for background work (Enter: the same; '-' for none)",
        Some(fast_default.unwrap_or("-")),
    )?;
    let fast_model = (fast != "-" && fast != model).then_some(fast);
    let bind = p.question("Address the daemon listens on", Some(DEFAULT_BIND))?;
    Ok(Answers {
        kind,
        name: provider_name(kind),
        base_url,
        key,
        model,
        fast_model,
        bind,
    })
}

/// The config file for the answers, with comments for the reader.
fn render(answers: &Answers) -> String {
    let quote = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let mut out = String::new();
    out.push_str("# Flynn's configuration, written by `flynn onboard`.\n");
    out.push_str("# Every key: docs/config.md. Check it with `flynn doctor`.\n");
    out.push_str(&format!(
        "version: {}\n\n",
        flynn_core::protocol::config::CONFIG_VERSION
    ));
    out.push_str("providers:\n");
    out.push_str(&format!("  {}:\n", answers.name));
    out.push_str(&format!("    kind: {}\n", answers.kind));
    if let Some(base) = &answers.base_url {
        out.push_str(&format!("    base_url: {}\n", quote(base)));
    }
    match &answers.key {
        Key::None => {}
        Key::Env(var) => {
            out.push_str("    # Read from the environment at every start.\n");
            out.push_str(&format!("    api_key: ${{{var}}}\n"));
        }
        Key::Literal(key) => out.push_str(&format!("    api_key: {}\n", quote(key))),
    }
    out.push_str("\nmodels:\n  tiers:\n");
    out.push_str("    # Conversations.\n");
    out.push_str(&format!(
        "    default: [{}]\n",
        quote(&format!("{}/{}", answers.name, answers.model))
    ));
    if let Some(fast) = &answers.fast_model {
        out.push_str("    # Background work: compaction, memory, summaries.\n");
        out.push_str(&format!(
            "    fast: [{}]\n",
            quote(&format!("{}/{fast}", answers.name))
        ));
    }
    out.push_str("\ngateway:\n");
    out.push_str("  # Where `flynn start` listens. Beyond 127.0.0.1 it needs gateway.token.\n");
    out.push_str(&format!("  bind: {}\n", quote(&answers.bind)));
    out
}

/// Writes the file readable by its owner only (it may hold a key); the
/// file it replaces is kept as `<file>.bak`.
fn write_private(file: &Path, text: &str, replace: bool) -> Result<(), Failure> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::other(format!("cannot create {}: {e}", dir.display())))?;
    }
    if replace && file.exists() {
        let backup = file.with_file_name(format!(
            "{}.bak",
            file.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        std::fs::copy(file, &backup)
            .map_err(|e| Failure::other(format!("cannot keep {}: {e}", backup.display())))?;
    }
    // The old file is made private first: the atomic write keeps the mode
    // of the file it replaces (0600 for a new one), and a crash mid-write
    // leaves the old file whole instead of a truncated one.
    #[cfg(unix)]
    if file.exists() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Failure::other(format!("cannot write {}: {e}", file.display())))?;
    }
    flynn_core::config::edit::write_atomically(file, text)
        .map_err(|e| Failure::other(format!("cannot write {}: {e}", file.display())))
}

/// Asks the provider for its model list, as `flynn doctor` does.
async fn check(answers: &Answers, loaded: &flynn_core::protocol::config::FlynnConfig) {
    let Some(provider): Option<&ProviderConfig> = loaded.providers.get(&answers.name) else {
        return;
    };
    let mut provider = provider.clone();
    if let Key::Env(var) = &answers.key {
        // The placeholder used for validation is not a key.
        provider.api_key = CliEnv.var(var).filter(|v| !v.trim().is_empty());
    }
    match flynn_core::models::probe(&answers.name, &provider, Duration::from_secs(5)).await {
        Ok(probe) => outln!(
            "checked: {} answered in {} ms",
            probe.url,
            probe.latency.as_millis()
        ),
        Err(error) => {
            eprintln!("warning: {error} (the file is written; fix this before the first message)")
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use flynn_core::config::MapEnv;

    fn args() -> OnboardArgs {
        OnboardArgs {
            config: None,
            force: false,
            non_interactive: false,
            provider: None,
            model: None,
            fast_model: None,
            base_url: None,
            api_key_env: None,
            bind: None,
            no_check: true,
        }
    }

    fn asked(answers: &str, env: &MapEnv) -> (Result<Answers, Failure>, String) {
        let mut input = std::io::Cursor::new(answers.as_bytes().to_vec());
        let mut out = Vec::new();
        let result = ask(&args(), env, &mut input, &mut out);
        (result, String::from_utf8(out).unwrap())
    }

    #[test]
    fn enter_everywhere_takes_the_defaults_from_the_environment() {
        let env = MapEnv::new().with("OPENAI_API_KEY", "sk-x");
        let (answers, _) = asked("\n\n\n\n\n", &env);
        assert_eq!(
            answers.unwrap(),
            Answers {
                kind: ProviderKind::Openai,
                name: "openai".to_owned(),
                base_url: None,
                key: Key::Env("OPENAI_API_KEY".to_owned()),
                model: "gpt-4o".to_owned(),
                fast_model: Some("gpt-4o-mini".to_owned()),
                bind: DEFAULT_BIND.to_owned(),
            }
        );
    }

    #[test]
    fn a_wrong_answer_is_asked_again_and_a_local_server_gets_its_url() {
        let (answers, prompts) = asked(
            "nope\n9\nlocalhost:8080\nhttp://127.0.0.1:8080/v1\nqwen2.5\n-\n0.0.0.0:18800\n",
            &MapEnv::new(),
        );
        assert_eq!(
            answers.unwrap(),
            Answers {
                kind: ProviderKind::OpenaiCompatible,
                name: "local".to_owned(),
                base_url: Some("http://127.0.0.1:8080/v1".to_owned()),
                key: Key::None,
                model: "qwen2.5".to_owned(),
                fast_model: None,
                bind: "0.0.0.0:18800".to_owned(),
            }
        );
        assert!(
            prompts.contains("'nope' is not one of the providers above"),
            "{prompts}"
        );
        assert!(
            prompts.contains("expected an http:// or https:// URL"),
            "{prompts}"
        );
    }

    #[test]
    fn a_pasted_key_is_kept_literally_and_the_file_validates() {
        let (answers, _) = asked("anthropic\nsk-ant-pasted\n\n\n\n", &MapEnv::new());
        let answers = answers.unwrap();
        assert_eq!(answers.key, Key::Literal("sk-ant-pasted".to_owned()));
        let text = render(&answers);
        assert!(text.contains("    api_key: \"sk-ant-pasted\"\n"), "{text}");
        let config = config::parse_str(&text, Path::new("config.yaml"), &MapEnv::new()).unwrap();
        assert_eq!(
            config.models.tiers.default[0].to_string(),
            "anthropic/claude-sonnet-4-5"
        );
        assert_eq!(
            config.providers["anthropic"].api_key.as_deref(),
            Some("sk-ant-pasted")
        );
    }

    #[test]
    fn stdin_ending_early_takes_the_defaults_or_says_what_was_missing() {
        let (answers, _) = asked("", &MapEnv::new().with("ANTHROPIC_API_KEY", "k"));
        assert_eq!(answers.unwrap().kind, ProviderKind::Anthropic);
        let (answers, _) = asked("openai-compatible\nhttp://h:1/v1\n", &MapEnv::new());
        let error = answers.unwrap_err();
        assert!(
            error
                .message
                .contains("no answer to \"Model for everyday answers\""),
            "{}",
            error.message
        );
    }
}
