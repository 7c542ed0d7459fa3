use std::fmt;

use flynn_protocol::config::SandboxMode;

use super::{Availability, Backend, SandboxError};

/// What `auto` finding no sandbox means, said where people look: first in
/// `flynn sandbox`, in `flynn doctor`, in the daemon's log at start-up.
pub(super) const NO_SANDBOX_WARNING: &str = "WARNING: commands run with no sandbox: \
     tools.sandbox.mode is auto and neither bubblewrap, Docker nor Landlock is available here, \
     so shell.exec and process.* run as Flynn's user and can read whatever it can \
     (FLYNN_HOME with the gateway token and sessions, ~/.ssh, the config file). \
     Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install \
     bubblewrap`), or set tools.sandbox.mode: none to accept it.";

/// How much the sandbox commands run in protects the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strength {
    /// bubblewrap or Docker: namespaces of their own, and only the listed
    /// paths of the host.
    Isolated,
    /// Landlock: file rules and (on new kernels) TCP rules, but the host's
    /// processes, Unix sockets by path and (on old kernels) the network
    /// stay in reach.
    Partial,
    /// `tools.sandbox.mode: none`, chosen in the config.
    NoneChosen,
    /// `auto` found no sandbox: commands run unsandboxed though nobody
    /// chose it.
    NoneFound,
    /// The configured sandbox cannot run (missing, or the config would
    /// show Flynn's own files): commands fail.
    Unusable,
}

/// What [`Sandbox::report`](super::Sandbox::report) found; `Display` is what `flynn sandbox`
/// prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxReport {
    /// `tools.sandbox.mode`.
    pub requested: SandboxMode,
    /// The sandbox commands run in, or why none can.
    pub active: Result<Backend, SandboxError>,
    /// Every backend, in `auto` order, with whether it is available.
    pub backends: Vec<(Backend, Availability)>,
    /// What commands may reach on the network.
    pub network: String,
    /// Whether commands are cut off from the network (for Landlock: TCP).
    pub network_isolated: bool,
    /// What commands may write, for the report's workspace.
    pub writable: Vec<String>,
    /// What commands may read, for the report's workspace.
    pub readable: Vec<String>,
    /// Flynn's own paths that lie inside what commands see and are
    /// covered (or, for Landlock, cut out).
    pub hidden: Vec<String>,
    /// Which variables commands get.
    pub environment: String,
}

impl SandboxReport {
    pub fn strength(&self) -> Strength {
        match (&self.active, self.requested) {
            (Err(_), _) => Strength::Unusable,
            (Ok(Backend::None), SandboxMode::Auto) => Strength::NoneFound,
            (Ok(Backend::None), _) => Strength::NoneChosen,
            (Ok(Backend::Landlock), _) => Strength::Partial,
            (Ok(Backend::Bubblewrap | Backend::Docker), _) => Strength::Isolated,
        }
    }

    /// The loud warning when `auto` found no sandbox; `None` otherwise
    /// (a chosen `none` is the owner's call, a missing named one an
    /// error of its own).
    pub fn warning(&self) -> Option<String> {
        (self.strength() == Strength::NoneFound).then(|| NO_SANDBOX_WARNING.to_owned())
    }
}

impl fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(warning) = self.warning() {
            writeln!(f, "{warning}")?;
        }
        let requested = mode_name(self.requested);
        match &self.active {
            Ok(backend) => writeln!(f, "sandbox: {backend} (tools.sandbox.mode: {requested})")?,
            Err(error) => writeln!(f, "sandbox: none can run: {error}")?,
        }
        writeln!(f, "network: {}", self.network)?;
        if !self.readable.is_empty() {
            writeln!(f, "readable: {}", self.readable.join("; "))?;
        }
        if !self.writable.is_empty() {
            writeln!(f, "writable: {}", self.writable.join(", "))?;
        }
        if !self.hidden.is_empty() {
            writeln!(
                f,
                "hidden: {} (Flynn's own; commands cannot read them)",
                self.hidden.join(", ")
            )?;
        }
        if !self.environment.is_empty() {
            writeln!(f, "environment: {}", self.environment)?;
        }
        writeln!(f, "backends:")?;
        let active = self.active.as_ref().ok().copied();
        for (backend, availability) in &self.backends {
            let state = match availability {
                Availability::Unavailable { reason } => format!("not available: {reason}"),
                Availability::Available { detail } if Some(*backend) == active => {
                    format!("active: {detail}")
                }
                Availability::Available { detail } => {
                    let why = match (self.requested, active) {
                        (SandboxMode::Auto, Some(first)) => format!("{first} comes first"),
                        _ => format!("tools.sandbox.mode is {requested}"),
                    };
                    format!("available, not used ({why}): {detail}")
                }
            };
            writeln!(f, "  {:<11} {state}", backend.name())?;
        }
        Ok(())
    }
}

fn mode_name(mode: SandboxMode) -> &'static str {
    match mode {
        SandboxMode::Auto => "auto",
        SandboxMode::Bubblewrap => "bubblewrap",
        SandboxMode::Docker => "docker",
        SandboxMode::Landlock => "landlock",
        SandboxMode::None => "none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn available() -> Availability {
        Availability::Available {
            detail: "ok".to_owned(),
        }
    }

    fn missing(reason: &str) -> Availability {
        Availability::Unavailable {
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn the_report_says_what_runs_and_why_the_others_do_not() {
        let report = SandboxReport {
            requested: SandboxMode::Auto,
            active: Ok(Backend::Docker),
            backends: vec![
                (Backend::Bubblewrap, missing("bwrap is not on PATH")),
                (Backend::Docker, available()),
                (Backend::Landlock, available()),
            ],
            network: "isolated (--network none)".to_owned(),
            network_isolated: true,
            writable: vec![
                "/ws".to_owned(),
                "/tmp (private to each command)".to_owned(),
            ],
            readable: vec![
                "the image's file system".to_owned(),
                "the writable directories".to_owned(),
            ],
            hidden: vec![],
            environment: "the image's own; tools.env adds GOPATH (docker run -e)".to_owned(),
        };
        assert_eq!(report.strength(), Strength::Isolated);
        assert_eq!(report.warning(), None);
        assert_eq!(
            report.to_string(),
            "sandbox: docker (tools.sandbox.mode: auto)\n\
             network: isolated (--network none)\n\
             readable: the image's file system; the writable directories\n\
             writable: /ws, /tmp (private to each command)\n\
             environment: the image's own; tools.env adds GOPATH (docker run -e)\n\
             backends:\n  \
             bubblewrap  not available: bwrap is not on PATH\n  \
             docker      active: ok\n  \
             landlock    available, not used (docker comes first): ok\n"
        );
    }

    #[test]
    fn bubblewrap_lists_what_commands_read_what_is_hidden_and_the_environment() {
        let report = SandboxReport {
            requested: SandboxMode::Bubblewrap,
            active: Ok(Backend::Bubblewrap),
            backends: vec![(Backend::Bubblewrap, available())],
            network: "isolated (a network namespace of its own, loopback only)".to_owned(),
            network_isolated: true,
            writable: vec![
                "/home/me".to_owned(),
                "/tmp (private to each command)".to_owned(),
            ],
            readable: vec![
                "/usr, /etc, /opt (system, read-only)".to_owned(),
                "/bin -> usr/bin (symlinks as on the host)".to_owned(),
                "the writable directories".to_owned(),
                "/run/agent.sock".to_owned(),
                "nothing else of the host ($HOME, FLYNN_HOME, /run, /var are not there)".to_owned(),
            ],
            hidden: vec!["/home/me/.local/share/flynn".to_owned()],
            environment: "cleared: only basic variables (PATH, LANG, TERM, TZ...) pass, HOME \
                          and TMPDIR are /tmp; tools.env adds none"
                .to_owned(),
        };
        assert_eq!(report.strength(), Strength::Isolated);
        assert_eq!(
            report.to_string(),
            "sandbox: bubblewrap (tools.sandbox.mode: bubblewrap)\n\
             network: isolated (a network namespace of its own, loopback only)\n\
             readable: /usr, /etc, /opt (system, read-only); /bin -> usr/bin (symlinks as on \
             the host); the writable directories; /run/agent.sock; nothing else of the host \
             ($HOME, FLYNN_HOME, /run, /var are not there)\n\
             writable: /home/me, /tmp (private to each command)\n\
             hidden: /home/me/.local/share/flynn (Flynn's own; commands cannot read them)\n\
             environment: cleared: only basic variables (PATH, LANG, TERM, TZ...) pass, HOME \
             and TMPDIR are /tmp; tools.env adds none\n\
             backends:\n  \
             bubblewrap  active: ok\n"
        );
    }

    #[test]
    fn auto_finding_nothing_says_so_loudly_and_a_chosen_none_does_not() {
        let nothing = vec![
            (Backend::Bubblewrap, missing("bwrap is not on PATH")),
            (Backend::Docker, missing("no engine")),
            (Backend::Landlock, missing("old kernel")),
            (Backend::None, available()),
        ];
        let report = SandboxReport {
            requested: SandboxMode::Auto,
            active: Ok(Backend::None),
            backends: nothing,
            network: "not restricted (no sandbox)".to_owned(),
            network_isolated: false,
            writable: vec!["everything Flynn's user may write".to_owned()],
            readable: vec!["everything Flynn's user may read".to_owned()],
            hidden: vec![],
            environment: "cleared: only basic variables (PATH, HOME, LANG, TERM, TZ...) pass; \
                          tools.env adds none"
                .to_owned(),
        };
        assert_eq!(report.strength(), Strength::NoneFound);
        assert_eq!(
            report.to_string(),
            "WARNING: commands run with no sandbox: tools.sandbox.mode is auto and neither \
             bubblewrap, Docker nor Landlock is available here, so shell.exec and process.* run \
             as Flynn's user and can read whatever it can (FLYNN_HOME with the gateway token \
             and sessions, ~/.ssh, the config file). Install bubblewrap (Debian/Ubuntu: \
             `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`), or set \
             tools.sandbox.mode: none to accept it.\n\
             sandbox: none (tools.sandbox.mode: auto)\n\
             network: not restricted (no sandbox)\n\
             readable: everything Flynn's user may read\n\
             writable: everything Flynn's user may write\n\
             environment: cleared: only basic variables (PATH, HOME, LANG, TERM, TZ...) pass; \
             tools.env adds none\n\
             backends:\n  \
             bubblewrap  not available: bwrap is not on PATH\n  \
             docker      not available: no engine\n  \
             landlock    not available: old kernel\n  \
             none        active: ok\n"
        );
        let chosen = SandboxReport {
            requested: SandboxMode::None,
            ..report
        };
        assert_eq!(chosen.strength(), Strength::NoneChosen);
        assert_eq!(chosen.warning(), None);
        assert!(
            chosen
                .to_string()
                .starts_with("sandbox: none (tools.sandbox.mode: none)\n"),
            "{chosen}"
        );
    }
}
