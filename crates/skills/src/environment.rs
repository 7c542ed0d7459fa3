//! What gating asks of the machine, behind a trait so tests can fake it.

use std::collections::BTreeSet;
use std::path::Path;

use crate::manifest::Requirements;

/// The facts about the machine a skill's requirements are checked against.
pub trait Environment {
    /// The operating system, as `std::env::consts::OS` names it (`linux`,
    /// `macos`, `windows`...).
    fn os(&self) -> &str;
    /// Whether `program` is an executable on `PATH`.
    fn has_binary(&self, program: &str) -> bool;
    /// Whether the environment variable is set and not empty.
    fn has_var(&self, name: &str) -> bool;
}

/// The real machine: `std::env::consts::OS`, a `PATH` lookup, `std::env`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemEnvironment;

impl Environment for SystemEnvironment {
    fn os(&self) -> &str {
        std::env::consts::OS
    }

    fn has_binary(&self, program: &str) -> bool {
        let Some(path) = std::env::var_os("PATH") else {
            return false;
        };
        std::env::split_paths(&path).any(|dir| {
            let candidate = dir.join(program);
            is_executable(&candidate)
                || (cfg!(windows) && is_executable(&candidate.with_extension("exe")))
        })
    }

    fn has_var(&self, name: &str) -> bool {
        std::env::var_os(name).is_some_and(|value| !value.is_empty())
    }
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// A fixed environment: for tests, and for checking a skill against another
/// machine's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixedEnvironment {
    pub os: String,
    pub bins: BTreeSet<String>,
    pub vars: BTreeSet<String>,
}

impl FixedEnvironment {
    /// An environment on `os` with no programs and no variables.
    pub fn new(os: &str) -> FixedEnvironment {
        FixedEnvironment {
            os: os.to_owned(),
            ..FixedEnvironment::default()
        }
    }

    /// Adds programs found on `PATH`.
    pub fn with_bins<'a>(mut self, bins: impl IntoIterator<Item = &'a str>) -> FixedEnvironment {
        self.bins.extend(bins.into_iter().map(str::to_owned));
        self
    }

    /// Adds environment variables that are set.
    pub fn with_vars<'a>(mut self, vars: impl IntoIterator<Item = &'a str>) -> FixedEnvironment {
        self.vars.extend(vars.into_iter().map(str::to_owned));
        self
    }
}

impl Environment for FixedEnvironment {
    fn os(&self) -> &str {
        &self.os
    }

    fn has_binary(&self, program: &str) -> bool {
        self.bins.contains(program)
    }

    fn has_var(&self, name: &str) -> bool {
        self.vars.contains(name)
    }
}

/// Why a skill with these requirements cannot run in `env`: one sentence
/// per missing thing, empty when it can.
pub fn unmet(requires: &Requirements, env: &dyn Environment) -> Vec<String> {
    let mut reasons = Vec::new();
    if !requires.os.is_empty() && !requires.os.iter().any(|os| os.as_str() == env.os()) {
        let names: Vec<&str> = requires.os.iter().map(|os| os.as_str()).collect();
        reasons.push(format!("runs on {} only", names.join(" or ")));
    }
    for bin in &requires.bins {
        if !env.has_binary(bin) {
            reasons.push(format!("needs the binary '{bin}' on PATH"));
        }
    }
    for var in &requires.env {
        if !env.has_var(var) {
            reasons.push(format!("needs {var} set in the environment"));
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Os;

    #[test]
    fn every_missing_requirement_is_a_reason() {
        let requires = Requirements {
            os: vec![Os::Macos],
            bins: vec!["gh".into(), "git".into()],
            env: vec!["GITHUB_TOKEN".into()],
        };
        let env = FixedEnvironment::new("linux").with_bins(["git"]);
        assert_eq!(
            unmet(&requires, &env),
            vec![
                "runs on macos only",
                "needs the binary 'gh' on PATH",
                "needs GITHUB_TOKEN set in the environment"
            ]
        );
        let env = FixedEnvironment::new("macos")
            .with_bins(["git", "gh"])
            .with_vars(["GITHUB_TOKEN"]);
        assert_eq!(unmet(&requires, &env), Vec::<String>::new());
    }

    #[test]
    fn the_system_environment_finds_a_program_on_path() {
        let env = SystemEnvironment;
        assert_eq!(env.os(), std::env::consts::OS);
        if cfg!(unix) {
            assert!(env.has_binary("sh"));
        }
        assert!(!env.has_binary("flynn-no-such-program-here"));
        assert!(!env.has_var("FLYNN_SKILLS_SURELY_UNSET_VARIABLE"));
    }
}
