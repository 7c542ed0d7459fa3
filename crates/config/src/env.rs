//! The environment Flynn reads, injected so tests never touch the process's.

use std::collections::BTreeMap;

/// Where environment variables come from.
///
/// Loading never reads `std::env` directly: callers pass [`ProcessEnv`] in
/// binaries and a [`MapEnv`] in tests.
pub trait Env {
    /// The variable's value, or `None` when it is unset (or not valid UTF-8).
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// An environment held in a map, for tests and embedders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapEnv {
    vars: BTreeMap<String, String>,
}

impl MapEnv {
    /// An empty environment.
    pub fn new() -> Self {
        MapEnv::default()
    }

    /// This environment with `name` set to `value`.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.vars.insert(name.into(), value.into());
    }
}

impl Env for MapEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for MapEnv {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        MapEnv {
            vars: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

/// The variable's value when it is set and not empty: an empty
/// `ANTHROPIC_API_KEY=` counts as unset for zero-config and paths.
pub(crate) fn non_empty(env: &dyn Env, name: &str) -> Option<String> {
    env.var(name).filter(|value| !value.is_empty())
}
