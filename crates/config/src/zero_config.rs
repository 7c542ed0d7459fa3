//! Values from the usual environment variables: the whole configuration
//! when there is no config file, what the file leaves out when there is
//! one, and the `FLYNN_MODEL` override.

use std::fmt;

use std::path::{Path, PathBuf};

use flynn_protocol::Tier;
use flynn_protocol::config::{FlynnConfig, ModelRef, ProviderConfig, ProviderKind};

use crate::env::{Env, non_empty};
use crate::error::{Error, Problem, Result};
use crate::validate::{is_http_url, unknown_provider};

/// The providers zero-config knows, in the order the default tier prefers
/// them, with the model the default tier gets and the variable holding the
/// provider's key (if it takes one).
const KNOWN: [(&str, &str, Option<&str>); 4] = [
    ("anthropic", "claude-sonnet-4-5", Some("ANTHROPIC_API_KEY")),
    ("openai", "gpt-4o-mini", Some("OPENAI_API_KEY")),
    ("gemini", "gemini-2.5-flash", Some("GEMINI_API_KEY")),
    ("ollama", "llama3.2", None),
];

/// Ollama's port when `OLLAMA_HOST` names none.
const OLLAMA_PORT: u16 = 11434;

/// A value of the configuration that came from the environment rather
/// than the file (what `flynn config get --origin` reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromEnv {
    /// The dotted path the value is at: `providers.openai.api_key`, or
    /// `providers.openai` for a provider made whole from the environment.
    pub path: String,
    /// The variables it came from.
    pub variables: Vec<String>,
}

impl FromEnv {
    fn new(path: String, variables: &[&str]) -> Self {
        FromEnv {
            path,
            variables: variables.iter().map(|v| (*v).to_owned()).collect(),
        }
    }
}

impl fmt::Display for FromEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} from {}", self.path, self.variables.join(", "))
    }
}

/// The configuration Flynn runs with when there is no config file: the
/// empty configuration filled in by [`fill_from_env`].
///
/// One provider for each group of variables that is set (an empty value
/// counts as unset):
/// - `anthropic` (kind `anthropic`) from `ANTHROPIC_API_KEY` and/or
///   `ANTHROPIC_BASE_URL`;
/// - `openai` from `OPENAI_API_KEY` and/or `OPENAI_BASE_URL`: kind `openai`
///   for a key alone or a key with an `api.openai.com` base URL, otherwise
///   `openai-compatible` (so a local server works without a key);
/// - `gemini` (kind `gemini`) from `GEMINI_API_KEY`;
/// - `ollama` (kind `ollama`) from `OLLAMA_HOST`, read as Ollama reads it
///   (`host`, `host:port`, `:port` or a URL) and normalised to
///   `http://host:port/v1`: a bare host gets port 11434, a URL keeps its
///   scheme's port, and `0.0.0.0` (a server's bind address) becomes
///   `127.0.0.1`.
///
/// The default tier is `FLYNN_MODEL` when set (see [`apply_model_override`]
/// for its rules); otherwise the first provider in the order anthropic,
/// openai, gemini, ollama that can be called (it has a key, or its kind
/// needs none) with `claude-sonnet-4-5`, `gpt-4o-mini`, `gemini-2.5-flash`
/// or `llama3.2`. With none of these variables set, the config has no
/// providers and an empty default tier.
pub fn from_env(env: &dyn Env) -> Result<FlynnConfig> {
    let mut config = FlynnConfig::default();
    fill_from_env(&mut config, env)?;
    Ok(config)
}

/// Fills in from the environment what a configuration leaves out, and
/// says what it filled in. The configuration's own values always win.
///
/// 1. **Providers.** A provider of the file named `anthropic`, `openai`,
///    `gemini` or `ollama`, or of that kind, takes a missing `api_key`
///    from `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GEMINI_API_KEY` and a
///    missing `base_url` from `ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`,
///    `OLLAMA_HOST`; a provider of another kind with a usual key variable
///    (`openrouter`: `OPENROUTER_API_KEY`, `groq`: `GROQ_API_KEY`,
///    `github-models`: `GITHUB_TOKEN`) takes its missing key from it. A
///    group of variables whose name the file does not use adds its
///    provider as [`from_env`] makes it.
/// 2. **`FLYNN_MODEL`** ([`apply_model_override`]).
/// 3. **The default tier**, when neither it nor `models.fallback` names a
///    model: the first provider named anthropic, openai, gemini, ollama
///    that can be called, with its usual model, as [`from_env`] chooses.
pub fn fill_from_env(config: &mut FlynnConfig, env: &dyn Env) -> Result<Vec<FromEnv>> {
    let mut filled = fill_providers(config, env)?;
    filled.extend(model_override(config, env)?);
    filled.extend(choose_default(config, &filled));
    Ok(filled)
}

/// The providers the environment would add to a configuration that names
/// none (for checking references in a file before it is filled in).
pub(crate) fn provider_names(env: &dyn Env) -> Vec<String> {
    let mut names = Vec::new();
    for group in &GROUPS {
        if group.key.and_then(|v| non_empty(env, v)).is_some()
            || group.url.and_then(|v| non_empty(env, v)).is_some()
        {
            names.push(group.name.to_owned());
        }
    }
    names
}

/// One group of variables that makes a provider.
struct Group {
    name: &'static str,
    kind: ProviderKind,
    key: Option<&'static str>,
    url: Option<&'static str>,
}

const GROUPS: [Group; 4] = [
    Group {
        name: "anthropic",
        kind: ProviderKind::Anthropic,
        key: Some("ANTHROPIC_API_KEY"),
        url: Some("ANTHROPIC_BASE_URL"),
    },
    Group {
        name: "openai",
        kind: ProviderKind::Openai,
        key: Some("OPENAI_API_KEY"),
        url: Some("OPENAI_BASE_URL"),
    },
    Group {
        name: "gemini",
        kind: ProviderKind::Gemini,
        key: Some("GEMINI_API_KEY"),
        url: None,
    },
    Group {
        name: "ollama",
        kind: ProviderKind::Ollama,
        key: None,
        url: Some("OLLAMA_HOST"),
    },
];

fn fill_providers(config: &mut FlynnConfig, env: &dyn Env) -> Result<Vec<FromEnv>> {
    let mut filled = Vec::new();
    for (name, provider) in &mut config.providers {
        let group = GROUPS
            .iter()
            .find(|g| g.name == name.as_str())
            .or_else(|| GROUPS.iter().find(|g| g.kind == provider.kind));
        let key_var = match group {
            Some(group) => group.key,
            None => provider.kind.api_key_env(),
        };
        if provider.api_key.is_none()
            && let Some(var) = key_var
            && let Some(key) = non_empty(env, var)
        {
            provider.api_key = Some(key);
            filled.push(FromEnv::new(format!("providers.{name}.api_key"), &[var]));
        }
        if provider.base_url.is_none()
            && let Some(var) = group.and_then(|g| g.url)
            && let Some(url) = group_url(env, var)?
        {
            provider.base_url = Some(url);
            filled.push(FromEnv::new(format!("providers.{name}.base_url"), &[var]));
        }
    }
    for group in &GROUPS {
        if config.providers.contains_key(group.name) {
            continue;
        }
        if let Some(provider) = provider_from_env(group.name, env)? {
            let set: Vec<&str> = [group.key, group.url]
                .into_iter()
                .flatten()
                .filter(|var| non_empty(env, var).is_some())
                .collect();
            let path = format!("providers.{}", group.name);
            filled.push(FromEnv::new(format!("{path}.kind"), &set));
            for (field, var) in [("api_key", group.key), ("base_url", group.url)] {
                if let Some(var) = var.filter(|var| set.contains(var)) {
                    filled.push(FromEnv::new(format!("{path}.{field}"), &[var]));
                }
            }
            config.providers.insert(group.name.to_owned(), provider);
        }
    }
    Ok(filled)
}

/// A group's base URL variable, normalised as its provider reads it.
fn group_url(env: &dyn Env, var: &str) -> Result<Option<String>> {
    if var == "OLLAMA_HOST" {
        return match non_empty(env, var) {
            Some(host) => ollama_base_url(&host).map(Some).ok_or_else(|| Error::Env {
                name: var.to_owned(),
                problem: Problem::InvalidUrl { url: host },
            }),
            None => Ok(None),
        };
    }
    url_var(env, var)
}

fn choose_default(config: &mut FlynnConfig, filled: &[FromEnv]) -> Option<FromEnv> {
    if !config.models.tiers.default.is_empty() || !config.models.fallback.is_empty() {
        return None;
    }
    let (name, model, _) = KNOWN.into_iter().find(|(name, _, _)| {
        config
            .providers
            .get(*name)
            .is_some_and(|p| p.api_key.is_some() || !p.kind.requires_api_key())
    })?;
    config.models.tiers.default = vec![ModelRef::new(name, model)];
    // Recorded as coming from the environment when the provider did.
    let prefix = format!("providers.{name}.");
    let mut variables: Vec<String> = Vec::new();
    for var in filled
        .iter()
        .filter(|f| f.path.starts_with(&prefix))
        .flat_map(|f| &f.variables)
    {
        if !variables.contains(var) {
            variables.push(var.clone());
        }
    }
    (!variables.is_empty()).then(|| FromEnv {
        path: "models.tiers.default".to_owned(),
        variables,
    })
}

/// Applies `FLYNN_MODEL=provider/model`, when set, as the whole default
/// tier.
///
/// A provider that is not configured but is one of `anthropic`, `openai`,
/// `gemini`, `ollama` is made from the environment as [`from_env`] would
/// (`ollama` needs nothing: it falls back to `http://127.0.0.1:11434/v1`);
/// a well-known provider whose variables are unset, or any other unknown
/// provider, is an [`Error::Env`].
pub fn apply_model_override(config: &mut FlynnConfig, env: &dyn Env) -> Result<()> {
    model_override(config, env).map(|_| ())
}

fn model_override(config: &mut FlynnConfig, env: &dyn Env) -> Result<Vec<FromEnv>> {
    const VAR: &str = "FLYNN_MODEL";
    let Some(value) = non_empty(env, VAR) else {
        return Ok(Vec::new());
    };
    let mut filled = Vec::new();
    let env_error = |problem: Problem| Error::Env {
        name: VAR.to_owned(),
        problem,
    };
    let model: ModelRef = value
        .parse()
        .map_err(|e: flynn_protocol::config::InvalidModelRef| {
            env_error(Problem::Other {
                message: e.to_string(),
            })
        })?;
    let name = model.provider();
    if !config.providers.contains_key(name) {
        match KNOWN.iter().find(|(known, _, _)| *known == name) {
            Some((_, _, key_var)) => {
                let provider = match (provider_from_env(name, env)?, key_var) {
                    (Some(provider), _) => provider,
                    (None, None) => ProviderConfig::new(ProviderKind::Ollama),
                    (None, Some(key_var)) => {
                        return Err(env_error(Problem::ProviderUnavailable {
                            name: name.to_owned(),
                            variable: (*key_var).to_owned(),
                        }));
                    }
                };
                filled.push(FromEnv::new(format!("providers.{name}.kind"), &[VAR]));
                config.providers.insert(name.to_owned(), provider);
            }
            None => {
                let mut available: Vec<String> = config.providers.keys().cloned().collect();
                for (known, _, _) in KNOWN {
                    if !available.iter().any(|a| a == known)
                        && (known == "ollama" || provider_from_env(known, env)?.is_some())
                    {
                        available.push(known.to_owned());
                    }
                }
                available.sort();
                if let Some(problem) = unknown_provider(name, &available) {
                    return Err(env_error(problem));
                }
            }
        }
    }
    config.models.tiers.default = vec![model];
    filled.push(FromEnv::new("models.tiers.default".to_owned(), &[VAR]));
    Ok(filled)
}

/// The provider `name` made from its environment variables, if any is set.
fn provider_from_env(name: &str, env: &dyn Env) -> Result<Option<ProviderConfig>> {
    let provider = match name {
        "anthropic" => {
            let api_key = non_empty(env, "ANTHROPIC_API_KEY");
            let base_url = url_var(env, "ANTHROPIC_BASE_URL")?;
            (api_key.is_some() || base_url.is_some()).then(|| ProviderConfig {
                api_key,
                base_url,
                ..ProviderConfig::new(ProviderKind::Anthropic)
            })
        }
        "openai" => {
            let api_key = non_empty(env, "OPENAI_API_KEY");
            let base_url = url_var(env, "OPENAI_BASE_URL")?;
            let kind = match (&api_key, &base_url) {
                (Some(_), None) => ProviderKind::Openai,
                (Some(_), Some(url)) if is_openai_api(url) => ProviderKind::Openai,
                _ => ProviderKind::OpenaiCompatible,
            };
            (api_key.is_some() || base_url.is_some()).then(|| ProviderConfig {
                api_key,
                base_url,
                ..ProviderConfig::new(kind)
            })
        }
        "gemini" => non_empty(env, "GEMINI_API_KEY").map(|api_key| ProviderConfig {
            api_key: Some(api_key),
            ..ProviderConfig::new(ProviderKind::Gemini)
        }),
        "ollama" => match non_empty(env, "OLLAMA_HOST") {
            Some(host) => Some(ProviderConfig {
                base_url: Some(ollama_base_url(&host).ok_or_else(|| Error::Env {
                    name: "OLLAMA_HOST".to_owned(),
                    problem: Problem::InvalidUrl { url: host.clone() },
                })?),
                ..ProviderConfig::new(ProviderKind::Ollama)
            }),
            None => None,
        },
        _ => None,
    };
    Ok(provider)
}

/// The variable naming a GGUF file for the zero-config fallback.
pub const LOCAL_MODEL_VAR: &str = "FLYNN_LOCAL_MODEL";

/// The name of the provider the fallback adds.
pub const LOCAL_PROVIDER: &str = "local";

/// The last resort when no provider is configured anywhere (neither the
/// config file nor the environment names one): a GGUF model on this
/// machine, run in process (`kind: local`) for every tier.
///
/// The model is `FLYNN_LOCAL_MODEL` when set (it must name a file), else
/// the first `*.gguf` file, by name, in `home/models` (where
/// `flynn models pull` and `scripts/fetch-smollm2.sh` put them). Adds the
/// provider `local` and sets every tier to `local/<file name>`; returns
/// the file, or `None` (and leaves `config` alone) when a provider is
/// configured or no model is found.
pub fn local_fallback(
    config: &mut FlynnConfig,
    home: &Path,
    env: &dyn Env,
) -> Result<Option<PathBuf>> {
    if !config.providers.is_empty() {
        return Ok(None);
    }
    let file = match non_empty(env, LOCAL_MODEL_VAR) {
        Some(path) => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(Error::Env {
                    name: LOCAL_MODEL_VAR.to_owned(),
                    problem: Problem::Other {
                        message: format!(
                            "{} is not a file; expected the path of a GGUF model (flynn models pull <repo>/<file.gguf> downloads one)",
                            path.display()
                        ),
                    },
                });
            }
            path
        }
        None => match first_gguf(&home.join("models")) {
            Some(path) => path,
            None => return Ok(None),
        },
    };
    let model = file
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .filter(|stem| !stem.is_empty() && !stem.chars().any(char::is_whitespace))
        .unwrap_or_else(|| "model".to_owned());
    config.providers.insert(
        LOCAL_PROVIDER.to_owned(),
        ProviderConfig {
            model_path: Some(file.clone()),
            ..ProviderConfig::new(ProviderKind::Local)
        },
    );
    let model = ModelRef::new(LOCAL_PROVIDER, model);
    for tier in Tier::ALL {
        let models = config.models.tiers.get_mut(tier);
        if models.is_empty() {
            *models = vec![model.clone()];
        }
    }
    Ok(Some(file))
}

/// [`local_fallback`], and what it filled in from the environment: when
/// `FLYNN_LOCAL_MODEL` chose the file, the provider and the tiers it set
/// came from that variable (a model found in `home/models` is the
/// built-in default and is not recorded).
pub(crate) fn local_fallback_recorded(
    config: &mut FlynnConfig,
    home: &Path,
    env: &dyn Env,
) -> Result<(Option<PathBuf>, Vec<FromEnv>)> {
    let empty: Vec<Tier> = Tier::ALL
        .into_iter()
        .filter(|tier| config.models.tiers.get(*tier).is_empty())
        .collect();
    let file = local_fallback(config, home, env)?;
    let mut filled = Vec::new();
    if file.is_some() && non_empty(env, LOCAL_MODEL_VAR).is_some() {
        for field in ["kind", "model_path"] {
            filled.push(FromEnv::new(
                format!("providers.{LOCAL_PROVIDER}.{field}"),
                &[LOCAL_MODEL_VAR],
            ));
        }
        for tier in empty {
            filled.push(FromEnv::new(
                format!("models.tiers.{tier}"),
                &[LOCAL_MODEL_VAR],
            ));
        }
    }
    Ok((file, filled))
}

/// The first `*.gguf` file in `dir`, by name (partial downloads end in
/// `.part` and are not taken).
fn first_gguf(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.is_file()
                && path
                    .extension()
                    .is_some_and(|ext| ext.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    files.sort();
    files.into_iter().next()
}

/// A base URL variable's value, which must be an http(s) URL.
fn url_var(env: &dyn Env, name: &str) -> Result<Option<String>> {
    match non_empty(env, name) {
        Some(url) if !is_http_url(&url) => Err(Error::Env {
            name: name.to_owned(),
            problem: Problem::InvalidUrl { url },
        }),
        url => Ok(url),
    }
}

fn is_openai_api(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .unwrap_or(&lower);
    let host = rest.split(['/', ':', '?', '#']).next().unwrap_or_default();
    host == "api.openai.com"
}

/// `OLLAMA_HOST` as Ollama's own client reads it, as the base URL of its
/// OpenAI-compatible API: `host`, `host:port` and `:port` get `http://`
/// and port 11434 when they name none; a URL keeps its scheme's port.
fn ollama_base_url(host: &str) -> Option<String> {
    let host = host.trim().trim_end_matches('/');
    let (scheme, rest, default_port) = match host.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest, None),
        None => ("http".to_owned(), host, Some(OLLAMA_PORT)),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    let mut authority = match authority.strip_prefix("0.0.0.0") {
        Some(port) => format!("127.0.0.1{port}"),
        None if authority.is_empty() || authority.starts_with(':') => {
            format!("127.0.0.1{authority}")
        }
        None => authority.to_owned(),
    };
    if let (false, Some(port)) = (has_port, default_port) {
        authority = format!("{authority}:{port}");
    }
    let path = if path.ends_with("/v1") {
        path.to_owned()
    } else {
        format!("{path}/v1")
    };
    let url = format!("{scheme}://{authority}{path}");
    is_http_url(&url).then_some(url)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn ollama_host_is_normalised_to_a_v1_url() {
        for (host, url) in [
            ("127.0.0.1:11434", "http://127.0.0.1:11434/v1"),
            ("gpu-box", "http://gpu-box:11434/v1"),
            ("gpu-box:8000", "http://gpu-box:8000/v1"),
            (":9999", "http://127.0.0.1:9999/v1"),
            ("0.0.0.0", "http://127.0.0.1:11434/v1"),
            ("0.0.0.0:11434", "http://127.0.0.1:11434/v1"),
            ("http://gpu-box:11434", "http://gpu-box:11434/v1"),
            ("http://gpu-box:11434/", "http://gpu-box:11434/v1"),
            (
                "https://ollama.example.org",
                "https://ollama.example.org/v1",
            ),
            ("http://gpu-box:11434/v1", "http://gpu-box:11434/v1"),
            ("http://proxy/ollama", "http://proxy/ollama/v1"),
            ("[::1]:11434", "http://[::1]:11434/v1"),
            ("[::1]", "http://[::1]:11434/v1"),
        ] {
            assert_eq!(ollama_base_url(host).as_deref(), Some(url), "{host}");
        }
        assert_eq!(ollama_base_url("ftp://x"), None);
        assert_eq!(ollama_base_url("host:port"), None);
    }

    #[test]
    fn only_the_openai_host_counts_as_openai() {
        assert!(is_openai_api("https://api.openai.com/v1"));
        assert!(is_openai_api("https://API.openai.com"));
        assert!(!is_openai_api("https://api.openai.com.evil.org/v1"));
        assert!(!is_openai_api("http://127.0.0.1:8080/v1"));
    }
}
