//! The environment the CLI reads config with: the process's, with
//! `--profile` standing in for `FLYNN_PROFILE`.

use std::sync::OnceLock;

use flynn_core::config::{Env, PROFILE_VAR, ProcessEnv};

static PROFILE: OnceLock<String> = OnceLock::new();

/// Makes `--profile NAME` win over `FLYNN_PROFILE` for this run.
pub fn set_profile(profile: String) {
    let _ = PROFILE.set(profile);
}

/// The process environment, with the `--profile` override.
#[derive(Debug, Clone, Copy, Default)]
pub struct CliEnv;

impl Env for CliEnv {
    fn var(&self, name: &str) -> Option<String> {
        if name == PROFILE_VAR
            && let Some(profile) = PROFILE.get()
        {
            return Some(profile.clone());
        }
        ProcessEnv.var(name)
    }
}
