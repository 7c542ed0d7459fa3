//! Loads and validates Flynn's YAML configuration.
//!
//! ```no_run
//! # fn main() -> Result<(), flynn_config::Error> {
//! let loaded = flynn_config::load(None, &flynn_config::ProcessEnv)?;
//! println!("data in {}", loaded.paths.home.display());
//! # Ok(())
//! # }
//! ```
//!
//! - [`load`] finds the file ([`Paths`]), parses it with [`parse_str`] and
//!   applies `FLYNN_MODEL`; with no file at the default path it builds the
//!   config from the environment instead ([`from_env`]).
//! - The environment is always injected ([`Env`]): [`ProcessEnv`] in
//!   binaries, [`MapEnv`] in tests. Nothing here reads or changes the
//!   process environment by itself.
//! - Errors are data: an invalid file gives [`Error::Invalid`] with one
//!   [`Diagnostic`] per problem (file, line, column, key path, [`Problem`]),
//!   printed as
//!   `config.yaml:12:5: models.tiers.fast[0]: unknown provider 'anthropc' (did you mean 'anthropic'?), expected one of the configured providers: anthropic`.
//!
//! # `${VAR}` in values
//!
//! String values may refer to environment variables; keys may not.
//! - `${NAME}` is the variable's value. An unset variable is an error that
//!   names it and points at the reference's line and column.
//! - `${NAME:-default}` is the value when it is set and not empty,
//!   `default` otherwise (taken literally, up to the first `}`).
//! - `$${` is a literal `${`. Any other `$` stays as it is.
//! - A value made of references that expands to nothing counts as not
//!   written: `api_key: ${OPENAI_API_KEY:-}` leaves an optional key unset,
//!   and a key with a default keeps its default. (Inside a list, an empty
//!   value stays an empty string.)
//! - A number or boolean key may be given as a reference
//!   (`max_iterations: ${MAX_ITERATIONS:-10}`); a quoted number without a
//!   reference stays a string and is refused where a number is expected.
//!
//! Values from the environment are never shown in error messages: they
//! may be secrets.
//!
//! # The environment, with or without a config file
//!
//! When no file exists at the default path, [`from_env`] builds the config
//! from `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, `OPENAI_API_KEY`,
//! `OPENAI_BASE_URL`, `GEMINI_API_KEY` and `OLLAMA_HOST`, one provider per
//! group of variables that is set. With a file, the same variables fill in
//! what the file leaves out (a provider's missing key or base URL, a
//! provider the file does not name, the default tier), and the file wins
//! where both set something ([`fill_from_env`]; [`Loaded::from_env`] says
//! what was filled in, [`origins`] where each value came from).
//! `FLYNN_MODEL=provider/model` picks the default tier, with or without a
//! file ([`apply_model_override`]).
//!
//! # Other conveniences
//!
//! A block with nothing under it (`providers:` with every entry commented
//! out) is an empty block. Booleans are YAML 1.2's `true`/`false` only.

mod decode;
mod document;
pub mod edit;
mod env;
mod error;
mod expand;
#[doc(hidden)]
pub mod fuzzing;
mod load;
pub mod migrate;
mod origin;
mod paths;
mod validate;
mod workspace;
mod zero_config;

pub use edit::{lookup, masked};
pub use env::{Env, MapEnv, ProcessEnv};
pub use error::{Diagnostic, Error, Problem, Result};
pub use load::{Loaded, Overlay, PROFILE_VAR, Source, load, parse_layers, parse_str};
pub use origin::{Origin, ValueOrigin, origins};
pub use paths::{Paths, create_home};
pub use workspace::{Workspace, WorkspaceOrigin};
pub use zero_config::{
    FromEnv, LOCAL_MODEL_VAR, LOCAL_PROVIDER, apply_model_override, fill_from_env, from_env,
    local_fallback,
};

/// The JSON Schema of the configuration file, pretty-printed with a
/// trailing newline (the content of `config/flynn.schema.json`).
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(flynn_protocol::config::FlynnConfig);
    let mut out = serde_json::to_string_pretty(&schema).unwrap_or_default();
    out.push('\n');
    out
}
