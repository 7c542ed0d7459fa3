//! The environment of a sandboxed command: never Flynn's own. It starts
//! empty, gets the basic variables of [`INHERITED_ENV`] that are set, the
//! sandbox's own adjustments (`HOME` pointing inside the sandbox), then
//! the names of `tools.env`. API keys, `FLYNN_GATEWAY_TOKEN`, chat tokens,
//! `SSH_AUTH_SOCK` and the like reach a command only when `tools.env`
//! names them.

use std::ffi::{OsStr, OsString};

/// Variables of Flynn's environment that commands (and MCP servers over
/// stdio) inherit. Nothing secret, and nothing that leads to a socket
/// (`SSH_AUTH_SOCK`, `DBUS_SESSION_BUS_ADDRESS`, `XDG_RUNTIME_DIR`,
/// `DOCKER_HOST`, `WAYLAND_DISPLAY`, `DISPLAY` stay out).
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TMPDIR",
    "TZ",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "NODE_PATH",
    "NVM_DIR",
    "npm_config_cache",
    "npm_config_prefix",
    "UV_CACHE_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Variables that point into the real home directory; inside bubblewrap
/// and Landlock they are left out, so programs derive them from the
/// sandbox's `HOME`.
pub(super) const HOME_BOUND: &[&str] = &["XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"];

/// What the `docker` client needs to find its engine; it does not pass
/// them into the container.
pub(super) const DOCKER_CLIENT: &[&str] = &[
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
];

/// The variables of `from` that [`INHERITED_ENV`] or `extra` name, in the
/// order of those lists (`extra` last, so it wins over a basic one).
pub fn inherited_env<I>(from: I, extra: &[String]) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let from: Vec<(OsString, OsString)> = from.into_iter().collect();
    let mut env = Environment::default();
    for name in INHERITED_ENV {
        env.copy(&from, name);
    }
    for name in extra {
        env.copy(&from, name);
    }
    env.into_vars()
}

/// An environment being put together; a name set twice keeps its last
/// value at its first place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Environment {
    vars: Vec<(OsString, OsString)>,
}

impl Environment {
    pub fn set(&mut self, name: impl Into<OsString>, value: impl Into<OsString>) {
        let (name, value) = (name.into(), value.into());
        match self.vars.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name, value)),
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.vars.retain(|(n, _)| n != name);
    }

    /// Copies `name` from `from` when it is set there.
    pub fn copy(&mut self, from: &[(OsString, OsString)], name: &str) {
        if let Some(value) = lookup(from, name) {
            self.set(name, value.to_owned());
        }
    }

    pub fn into_vars(self) -> Vec<(OsString, OsString)> {
        self.vars
    }
}

/// The value of `name` in `env`.
pub(super) fn lookup<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_the_basic_variables_and_the_named_ones_pass() {
        let host = vars(&[
            ("ANTHROPIC_API_KEY", "sk-ant-secret"),
            ("FLYNN_GATEWAY_TOKEN", "gw-secret"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("LANG", "C.UTF-8"),
            ("GOPATH", "/home/me/go"),
            ("PATH", "/usr/bin:/bin"),
        ]);
        assert_eq!(
            inherited_env(host.clone(), &[]),
            vars(&[("PATH", "/usr/bin:/bin"), ("LANG", "C.UTF-8")])
        );
        assert_eq!(
            inherited_env(host, &["GOPATH".to_owned(), "UNSET_ONE".to_owned()]),
            vars(&[
                ("PATH", "/usr/bin:/bin"),
                ("LANG", "C.UTF-8"),
                ("GOPATH", "/home/me/go")
            ])
        );
    }

    #[test]
    fn nothing_that_leads_to_a_socket_or_a_secret_is_inherited() {
        for name in [
            "SSH_AUTH_SOCK",
            "DBUS_SESSION_BUS_ADDRESS",
            "XDG_RUNTIME_DIR",
            "DOCKER_HOST",
            "DISPLAY",
            "WAYLAND_DISPLAY",
            "FLYNN_GATEWAY_TOKEN",
        ] {
            assert!(!INHERITED_ENV.contains(&name), "{name}");
        }
        for name in INHERITED_ENV {
            let upper = name.to_ascii_uppercase();
            for word in ["KEY", "TOKEN", "SECRET", "PASSWORD", "SOCK"] {
                assert!(!upper.contains(word), "{name}");
            }
        }
    }
}
