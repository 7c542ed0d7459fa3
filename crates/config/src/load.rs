//! Reading the config file, or the environment when there is none.

use std::path::{Path, PathBuf};

use flynn_protocol::config::FlynnConfig;

use crate::decode::decode;
use crate::document::{Document, Located, NodeKind, merge};
use crate::env::Env;
use crate::error::{Diagnostic, Error, Result};
use crate::paths::{self, Paths};
use crate::validate;
use crate::zero_config::{self, FromEnv};

/// A loaded configuration and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: FlynnConfig,
    pub source: Source,
    pub paths: Paths,
    /// The profile overlay merged over the file (`FLYNN_PROFILE`), if any.
    pub overlay: Option<Overlay>,
    /// What the environment filled in ([`crate::fill_from_env`]), in the
    /// order it was filled.
    pub from_env: Vec<FromEnv>,
    /// The GGUF model the zero-config fallback runs for every tier, when
    /// no provider is configured anywhere, neither in the file nor in the
    /// environment ([`crate::local_fallback`]).
    pub local_fallback: Option<PathBuf>,
}

/// A profile overlay: `profiles/<name>.overlay.yaml` next to the config
/// file, merged over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlay {
    pub profile: String,
    pub file: PathBuf,
}

/// The variable that names the profile to overlay (`--profile` sets it).
pub const PROFILE_VAR: &str = "FLYNN_PROFILE";

impl Overlay {
    /// The overlay file of `profile` for `config_file`.
    pub fn path(config_file: &Path, profile: &str) -> PathBuf {
        config_file
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join("profiles")
            .join(format!("{profile}.overlay.yaml"))
    }

    /// The profiles that exist next to `config_file`, sorted.
    pub fn available(config_file: &Path) -> Vec<String> {
        let dir = Overlay::path(config_file, "x");
        let Some(dir) = dir.parent() else {
            return Vec::new();
        };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".overlay.yaml").map(str::to_owned)
            })
            .collect();
        names.sort();
        names
    }
}

/// Where a configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// This config file.
    File(PathBuf),
    /// No config file exists at the default path: built from the
    /// environment (see [`crate::from_env`]).
    Environment,
}

/// Loads the configuration Flynn runs with.
///
/// Reads [`Paths::config_file`] (the `explicit` path, else `FLYNN_CONFIG`,
/// else the default) with [`parse_str`], then fills in from the
/// environment what the file leaves out: provider keys and base URLs,
/// `FLYNN_MODEL`, the default tier ([`crate::fill_from_env`]). When the
/// file is missing at the default path, the config comes from the
/// environment alone ([`crate::from_env`]); when a file named by
/// `explicit` or `FLYNN_CONFIG` is missing, that is [`Error::NotFound`].
/// When, after that, no provider is configured at all, a GGUF model in
/// `FLYNN_HOME/models` (or `FLYNN_LOCAL_MODEL`) is used for every tier
/// ([`crate::local_fallback`]).
pub fn load(explicit: Option<&Path>, env: &dyn Env) -> Result<Loaded> {
    let (paths, named) = paths::resolve(explicit, env)?;
    let profile = crate::env::non_empty(env, PROFILE_VAR);
    let mut overlay = None;
    let (mut config, source) = match std::fs::read_to_string(&paths.config_file) {
        Ok(text) => {
            let layer = match &profile {
                Some(profile) => {
                    let (chosen, text) = read_overlay(&paths.config_file, profile)?;
                    overlay = Some(chosen);
                    Some(text)
                }
                None => None,
            };
            let config = parse_layers(
                &text,
                &paths.config_file,
                overlay
                    .as_ref()
                    .zip(layer.as_deref())
                    .map(|(o, text)| (text, o.file.as_path())),
                env,
            )?;
            (config, Source::File(paths.config_file.clone()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if named {
                return Err(Error::NotFound {
                    path: paths.config_file,
                });
            }
            if let Some(profile) = profile {
                return Err(Error::Profile {
                    profile,
                    problem: format!(
                        "there is no config file to overlay ({} does not exist); expected a config file (`flynn onboard` writes one) or {PROFILE_VAR} unset",
                        paths.config_file.display()
                    ),
                });
            }
            (FlynnConfig::default(), Source::Environment)
        }
        Err(source) => {
            return Err(Error::Read {
                path: paths.config_file,
                source,
            });
        }
    };
    let mut from_env = zero_config::fill_from_env(&mut config, env)?;
    // Only after the environment had its say: the fallback applies when
    // no provider is configured at all.
    let (local_fallback, filled) =
        zero_config::local_fallback_recorded(&mut config, &paths.home, env)?;
    from_env.extend(filled);
    Ok(Loaded {
        config,
        source,
        paths,
        overlay,
        from_env,
        local_fallback,
    })
}

/// Finds and reads the overlay of `profile`.
fn read_overlay(config_file: &Path, profile: &str) -> Result<(Overlay, String)> {
    let valid = !profile.is_empty()
        && profile
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(Error::Profile {
            profile: profile.to_owned(),
            problem: "invalid profile name, expected letters, digits, '-' and '_'".to_owned(),
        });
    }
    let file = Overlay::path(config_file, profile);
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok((
            Overlay {
                profile: profile.to_owned(),
                file,
            },
            text,
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let available = Overlay::available(config_file);
            Err(Error::Profile {
                profile: profile.to_owned(),
                problem: format!(
                    "no overlay file {}, expected one of: {}",
                    file.display(),
                    if available.is_empty() {
                        "(no profiles yet)".to_owned()
                    } else {
                        available.join(", ")
                    }
                ),
            })
        }
        Err(source) => Err(Error::Read { path: file, source }),
    }
}

/// Parses a config file's text: YAML, `${VAR}` expansion from `env`, the
/// types, then the checks across blocks. `origin` names the text in
/// errors. Fills in nothing from the environment (no `FLYNN_MODEL`, no
/// provider keys: [`crate::fill_from_env`] does that), but models may name
/// a provider the environment would add (`anthropic` with
/// `ANTHROPIC_API_KEY` set).
pub fn parse_str(text: &str, origin: &Path, env: &dyn Env) -> Result<FlynnConfig> {
    parse_layers(text, origin, None, env)
}

/// Parses a config file with an overlay (its text and file) merged over
/// it. Problems name the file and line they come from.
pub fn parse_layers(
    text: &str,
    origin: &Path,
    overlay: Option<(&str, &Path)>,
    env: &dyn Env,
) -> Result<FlynnConfig> {
    let base = Document::parse(text)
        .map_err(|located| Error::invalid(diagnostic(&Origins::one(origin), located)))?;
    let Some((layer, layer_file)) = overlay else {
        return parse_document(&base, &Origins::one(origin), env);
    };
    let mut top = Document::parse(layer)
        .map_err(|located| Error::invalid(diagnostic(&Origins::one(layer_file), located)))?;
    if !matches!(top.root.kind, NodeKind::Map(_) | NodeKind::Null) {
        return Err(Error::Profile {
            profile: layer_file.display().to_string(),
            problem:
                "the overlay is not a mapping, expected keys of the config file (e.g. `models:`)"
                    .to_owned(),
        });
    }
    // One text holding both files, so every node's line and byte range
    // stays unique: the overlay's lines come after the file's.
    let mut combined = String::with_capacity(text.len() + layer.len() + 1);
    combined.push_str(text);
    if !combined.is_empty() && !combined.ends_with('\n') {
        combined.push('\n');
    }
    let lines_before = combined.matches('\n').count() as u64;
    top.root.shift(lines_before, combined.len());
    combined.push_str(layer);
    let doc = Document {
        text: &combined,
        root: merge(base.root, top.root),
    };
    let origins = Origins {
        base: origin,
        overlay: Some((layer_file, lines_before)),
    };
    parse_document(&doc, &origins, env)
}

fn parse_document(doc: &Document<'_>, origins: &Origins<'_>, env: &dyn Env) -> Result<FlynnConfig> {
    let invalid = |located: Located| Error::invalid(diagnostic(origins, located));
    validate::check_version(doc).map_err(invalid)?;
    let config: FlynnConfig = decode(doc, env).map_err(invalid)?;
    // A model may name a provider the environment adds (`load` fills it
    // in after parsing).
    let from_env = zero_config::provider_names(env);
    let problems = validate::validate(&config, doc, &from_env);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(Error::Invalid {
            diagnostics: problems
                .into_iter()
                .map(|located| diagnostic(origins, located))
                .collect(),
        })
    }
}

/// Which file a line of the parsed text belongs to.
struct Origins<'a> {
    base: &'a Path,
    /// The overlay file, and how many lines of the file come before it.
    overlay: Option<(&'a Path, u64)>,
}

impl<'a> Origins<'a> {
    fn one(file: &'a Path) -> Self {
        Origins {
            base: file,
            overlay: None,
        }
    }
}

fn diagnostic(origins: &Origins<'_>, located: Located) -> Diagnostic {
    let (path, line) = match origins.overlay {
        Some((file, before)) if located.line > before => (file, located.line - before),
        _ => (origins.base, located.line),
    };
    Diagnostic {
        path: path.to_path_buf(),
        line,
        column: located.column,
        key_path: located.key_path.to_string(),
        problem: *located.problem,
    }
}
