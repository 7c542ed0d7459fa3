use std::fmt;

use flynn_protocol::config::SandboxMode;

use super::{Availability, Backend, SandboxError};

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
}

impl fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let requested = mode_name(self.requested);
        match &self.active {
            Ok(backend) => writeln!(f, "sandbox: {backend} (tools.sandbox.mode: {requested})")?,
            Err(error) => writeln!(f, "sandbox: none can run: {error}")?,
        }
        writeln!(f, "network: {}", self.network)?;
        if !self.writable.is_empty() {
            writeln!(f, "writable: {}", self.writable.join(", "))?;
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
        };
        assert_eq!(
            report.to_string(),
            "sandbox: docker (tools.sandbox.mode: auto)\n\
             network: isolated (--network none)\n\
             writable: /ws, /tmp (private to each command)\n\
             backends:\n  \
             bubblewrap  not available: bwrap is not on PATH\n  \
             docker      active: ok\n  \
             landlock    available, not used (docker comes first): ok\n"
        );
    }
}
