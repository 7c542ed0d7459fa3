//! Reading the config file, or the environment when there is none.

use std::path::{Path, PathBuf};

use flynn_protocol::config::FlynnConfig;

use crate::decode::decode;
use crate::document::{Document, Located};
use crate::env::Env;
use crate::error::{Diagnostic, Error, Result};
use crate::paths::{self, Paths};
use crate::validate;
use crate::zero_config;

/// A loaded configuration and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: FlynnConfig,
    pub source: Source,
    pub paths: Paths,
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
/// else the default) with [`parse_str`], then applies `FLYNN_MODEL`
/// ([`crate::apply_model_override`]). When the file is missing at the
/// default path, the config comes from the environment
/// ([`crate::from_env`]); when a file named by `explicit` or `FLYNN_CONFIG`
/// is missing, that is [`Error::NotFound`].
pub fn load(explicit: Option<&Path>, env: &dyn Env) -> Result<Loaded> {
    let (paths, named) = paths::resolve(explicit, env)?;
    let (config, source) = match std::fs::read_to_string(&paths.config_file) {
        Ok(text) => {
            let mut config = parse_str(&text, &paths.config_file, env)?;
            zero_config::apply_model_override(&mut config, env)?;
            (config, Source::File(paths.config_file.clone()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if named {
                return Err(Error::NotFound {
                    path: paths.config_file,
                });
            }
            (zero_config::from_env(env)?, Source::Environment)
        }
        Err(source) => {
            return Err(Error::Read {
                path: paths.config_file,
                source,
            });
        }
    };
    Ok(Loaded {
        config,
        source,
        paths,
    })
}

/// Parses a config file's text: YAML, `${VAR}` expansion from `env`, the
/// types, then the checks across blocks. `origin` names the text in
/// errors. Does not apply `FLYNN_MODEL`.
pub fn parse_str(text: &str, origin: &Path, env: &dyn Env) -> Result<FlynnConfig> {
    let invalid = |located: Located| Error::invalid(diagnostic(origin, located));
    let doc = Document::parse(text).map_err(invalid)?;
    validate::check_version(&doc).map_err(invalid)?;
    let config: FlynnConfig = decode(&doc, env).map_err(invalid)?;
    let problems = validate::validate(&config, &doc);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(Error::Invalid {
            diagnostics: problems
                .into_iter()
                .map(|located| diagnostic(origin, located))
                .collect(),
        })
    }
}

fn diagnostic(origin: &Path, located: Located) -> Diagnostic {
    Diagnostic {
        path: origin.to_path_buf(),
        line: located.line,
        column: located.column,
        key_path: located.key_path.to_string(),
        problem: *located.problem,
    }
}
