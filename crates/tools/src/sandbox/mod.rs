//! The OS sandbox that `shell.exec` and the `process.*` tools run commands
//! in.
//!
//! A [`Sandbox`] turns "run `sh -c <command>` in a directory" into a
//! [`SandboxedChild`]: stdout and stderr piped, stdin empty, a process group
//! of its own, and the whole group killed when the child is dropped.
//!
//! Which sandbox runs is `tools.sandbox.mode`: `bubblewrap` (`bwrap`: own
//! namespaces, and a file system made of the system directories
//! read-only, the workspace writable, and nothing else of the host),
//! `docker` (a container per command), `landlock` (kernel rules applied
//! in-process: read the system directories, write the workspace), `none`,
//! or `auto`, the first available of those in that order. `auto` that
//! finds nothing runs commands unsandboxed, but never quietly: the report,
//! `flynn doctor` and the daemon's start-up say so loudly
//! ([`SandboxReport::warning`]). What this host has is probed once per
//! [`Sandbox`] and cached; naming a mode the host lacks is an error when a
//! command runs, which says what to install. [`Sandbox::report`] tells
//! which one is active and why.
//!
//! What a command sees is the same for every backend that has a view of
//! the file system (see `view.rs`): the [`SYSTEM_DIRS`] read-only,
//! the workspace and `tools.sandbox.writable` read-write,
//! `tools.sandbox.readable` read-only, and nothing else: not `$HOME`, not
//! `FLYNN_HOME`, not `/run` (so no D-Bus, Docker or ssh-agent socket).
//! Paths Flynn keeps to itself ([`SandboxPaths`]: `FLYNN_HOME`, the config
//! file's directory, always [`SYSTEM_CONFIG`]) look empty when they lie
//! inside something shown, say a workspace set to `$HOME`. Landlock can
//! only grant rights, never take them back inside a directory it opened
//! for writing: when such a path lies inside the workspace (or a
//! `writable` directory) it refuses to run commands, with an error naming
//! `tools.workspace`. Landlock does not govern connecting to Unix sockets
//! by path either.
//!
//! The environment of every command, whatever the backend, starts empty:
//! only the basic variables of [`INHERITED_ENV`] and the names of
//! `tools.env` pass (see `env.rs`). Inside bubblewrap `HOME` is the private
//! `/tmp`; under Landlock it is the workspace.

mod bwrap;
mod docker;
mod env;
mod landlock;
mod report;
mod view;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flynn_protocol::config::{SandboxConfig, SandboxMode, ToolsConfig};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::sync::OnceCell;

pub use crate::error::SandboxError;
pub use env::{INHERITED_ENV, inherited_env};
pub use report::{SandboxReport, Strength};
pub use view::{SYSTEM_CONFIG, SYSTEM_DIRS};

use env::Environment;
use view::{SystemPath, View};

/// How long a probe (`bwrap`, `docker info`) may take before the sandbox
/// it checks counts as unavailable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// `HOME` and `TMPDIR` inside bubblewrap: the private tmpfs, which exists,
/// is writable and holds nothing of the host.
const BWRAP_HOME: &str = "/tmp";

/// The sandboxes `auto` tries, strongest first.
pub const AUTO_ORDER: [Backend; 4] = [
    Backend::Bubblewrap,
    Backend::Docker,
    Backend::Landlock,
    Backend::None,
];

/// A sandbox that can actually run commands (`auto` resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Bubblewrap,
    Docker,
    Landlock,
    None,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Bubblewrap => "bubblewrap",
            Backend::Docker => "docker",
            Backend::Landlock => "landlock",
            Backend::None => "none",
        }
    }

    /// The mode that names this backend explicitly.
    pub fn mode(self) -> SandboxMode {
        match self {
            Backend::Bubblewrap => SandboxMode::Bubblewrap,
            Backend::Docker => SandboxMode::Docker,
            Backend::Landlock => SandboxMode::Landlock,
            Backend::None => SandboxMode::None,
        }
    }

    /// What to do when this backend is named but missing.
    fn fix(self) -> &'static str {
        match self {
            Backend::Bubblewrap => {
                "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`) or set tools.sandbox.mode to auto or none"
            }
            Backend::Docker => {
                "start the Docker engine (or install Docker) or set tools.sandbox.mode to auto, bubblewrap or landlock"
            }
            Backend::Landlock => {
                "use a Linux kernel with Landlock enabled (5.13 or later, `landlock` in the `lsm=` boot option) or set tools.sandbox.mode to auto or bubblewrap"
            }
            Backend::None => "set tools.sandbox.mode to auto",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a sandbox can run on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// It can; `detail` says with what (the program, its version).
    Available { detail: String },
    /// It cannot, and why.
    Unavailable { reason: String },
}

impl Availability {
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available { .. })
    }
}

/// The programs the sandbox runs; tests point them at fakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs {
    /// `bwrap`, looked up on `PATH` unless it is a path.
    pub bwrap: PathBuf,
    /// `docker`, looked up on `PATH` unless it is a path.
    pub docker: PathBuf,
    /// How long a probe may take.
    pub probe_timeout: Duration,
}

impl Default for Programs {
    fn default() -> Self {
        Programs {
            bwrap: PathBuf::from("bwrap"),
            docker: PathBuf::from("docker"),
            probe_timeout: PROBE_TIMEOUT,
        }
    }
}

/// Paths of Flynn's own that commands must not read, even when they lie
/// inside the workspace or a `readable` directory: they look empty there
/// (bubblewrap, Docker) or make Landlock refuse to run.
/// [`SYSTEM_CONFIG`] is always hidden besides these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPaths {
    pub hidden: Vec<PathBuf>,
}

impl SandboxPaths {
    /// `home` (`FLYNN_HOME`: the gateway token, sessions, memory) and the
    /// config file: its whole directory when that is Flynn's own (named
    /// `flynn`, as `~/.config/flynn`), else the file alone.
    pub fn flynn(home: &Path, config_file: Option<&Path>) -> Self {
        let mut hidden = vec![home.to_path_buf()];
        if let Some(file) = config_file {
            match file.parent() {
                Some(dir) if dir.file_name().is_some_and(|name| name == "flynn") => {
                    hidden.push(dir.to_path_buf());
                }
                _ => hidden.push(file.to_path_buf()),
            }
        }
        SandboxPaths { hidden }
    }
}

/// Runs commands in the configured OS sandbox; see the module docs.
pub struct Sandbox {
    config: SandboxConfig,
    /// The workspace the report describes; each command names its own.
    workspace: PathBuf,
    programs: Programs,
    /// `tools.env`: names of Flynn's variables commands also get.
    env_names: Vec<String>,
    /// See [`SandboxPaths`].
    hidden: Vec<PathBuf>,
    /// The environment commands' variables come from; Flynn's own when
    /// `None`.
    host_env: Option<Vec<(OsString, OsString)>>,
    bwrap: OnceCell<Availability>,
    docker: OnceCell<Availability>,
    landlock: OnceLock<Result<landlock::Support, String>>,
}

/// Numbers Docker containers, so that their names are unique in this
/// process whatever the number of sandboxes.
static CONTAINERS: AtomicU64 = AtomicU64::new(0);

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.config)
            .field("workspace", &self.workspace)
            .field("programs", &self.programs)
            .field("env_names", &self.env_names)
            .field("hidden", &self.hidden)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// `workspace` is the one [`Sandbox::report`] describes; commands run
    /// in the workspace [`Sandbox::spawn`] is given.
    pub fn new(config: SandboxConfig, workspace: impl Into<PathBuf>) -> Self {
        Sandbox {
            config,
            workspace: workspace.into(),
            programs: Programs::default(),
            env_names: Vec::new(),
            hidden: Vec::new(),
            host_env: None,
            bwrap: OnceCell::new(),
            docker: OnceCell::new(),
            landlock: OnceLock::new(),
        }
    }

    /// `tools.sandbox` and `tools.env`, with `tools.workspace` (or the
    /// current directory) as the workspace.
    pub fn from_tools_config(config: &ToolsConfig) -> Self {
        let workspace = config
            .workspace
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        Sandbox::new(config.sandbox.clone(), workspace).with_env(config.env.clone())
    }

    /// Uses these programs instead of `bwrap` and `docker` from `PATH`.
    pub fn with_programs(mut self, programs: Programs) -> Self {
        self.programs = programs;
        self
    }

    /// Lets commands have these variables of Flynn's environment
    /// (`tools.env`) besides the basic ones.
    pub fn with_env(mut self, names: Vec<String>) -> Self {
        self.env_names = names;
        self
    }

    /// Keeps these paths from commands; see [`SandboxPaths`].
    pub fn with_paths(mut self, paths: &SandboxPaths) -> Self {
        self.hidden = paths.hidden.clone();
        self
    }

    /// Takes commands' variables from `vars` instead of Flynn's own
    /// environment (tests give secrets this way without touching the
    /// process's environment).
    pub fn with_host_env(mut self, vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        self.host_env = Some(vars.into_iter().collect());
        self
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Whether one backend can run here (probed once, then cached).
    pub async fn availability(&self, backend: Backend) -> Availability {
        match backend {
            Backend::Bubblewrap => self
                .bwrap
                .get_or_init(|| bwrap::probe(&self.programs.bwrap, self.programs.probe_timeout))
                .await
                .clone(),
            Backend::Docker => self
                .docker
                .get_or_init(|| docker::probe(&self.programs.docker, self.programs.probe_timeout))
                .await
                .clone(),
            Backend::Landlock => match self.landlock_support() {
                Ok(support) => Availability::Available {
                    detail: support.to_string(),
                },
                Err(reason) => Availability::Unavailable {
                    reason: reason.clone(),
                },
            },
            Backend::None => Availability::Available {
                detail: "commands run unrestricted, as Flynn's user".to_owned(),
            },
        }
    }

    fn landlock_support(&self) -> &Result<landlock::Support, String> {
        self.landlock.get_or_init(landlock::probe)
    }

    /// The backend commands run in: the configured one, or for `auto` the
    /// first available. Probes only as far as needed.
    pub async fn active(&self) -> Result<Backend, SandboxError> {
        let candidates: &[Backend] = match self.config.mode {
            SandboxMode::Auto => &AUTO_ORDER,
            SandboxMode::Bubblewrap => &[Backend::Bubblewrap],
            SandboxMode::Docker => &[Backend::Docker],
            SandboxMode::Landlock => &[Backend::Landlock],
            SandboxMode::None => &[Backend::None],
        };
        let mut known = Vec::new();
        for &backend in candidates {
            let availability = self.availability(backend).await;
            let found = availability.is_available();
            known.push((backend, availability));
            if found {
                break;
            }
        }
        choose(self.config.mode, &known)
    }

    /// What the daemon logs at start-up: a loud warning when `auto` found
    /// no sandbox, or why commands cannot run (the configured sandbox is
    /// missing, or the workspace would show Flynn's own files). Probes
    /// only as far as [`Sandbox::active`].
    pub async fn startup_warning(&self) -> Option<String> {
        let cannot = |error: SandboxError| {
            Some(format!(
                "shell.exec and process.* cannot run commands: {error}"
            ))
        };
        match self.active().await {
            Ok(Backend::None) if self.config.mode == SandboxMode::Auto => {
                Some(report::NO_SANDBOX_WARNING.to_owned())
            }
            Ok(Backend::None) => None,
            Ok(backend) => match View::new(&self.config, &self.workspace, &self.hidden) {
                Ok(view) if backend == Backend::Landlock => {
                    view.landlock_conflict().and_then(cannot)
                }
                Ok(_) => None,
                Err(error) => cannot(error),
            },
            Err(error) => cannot(error),
        }
    }

    /// Which sandbox is active, what each one's state is and why it was
    /// not picked, and what commands may read, write and reach. Probes
    /// every backend.
    pub async fn report(&self) -> SandboxReport {
        let mut backends = Vec::new();
        for backend in AUTO_ORDER {
            backends.push((backend, self.availability(backend).await));
        }
        let mut active = choose(self.config.mode, &backends);
        let mut view = None;
        if let Ok(backend) = active
            && backend != Backend::None
        {
            match View::new(&self.config, &self.workspace, &self.hidden) {
                Ok(seen) => match seen.landlock_conflict() {
                    Some(error) if backend == Backend::Landlock => active = Err(error),
                    _ => view = Some(seen),
                },
                Err(error) => active = Err(error),
            }
        }
        let (network, network_isolated) = match &active {
            Ok(backend) => self.network(*backend),
            Err(_) => ("no command can run".to_owned(), false),
        };
        let (writable, readable, hidden, environment) = match (&active, &view) {
            (Ok(backend), view) => (
                writable_description(*backend, view.as_ref()),
                readable_description(*backend, view.as_ref()),
                hidden_description(*backend, view.as_ref()),
                self.environment_description(*backend),
            ),
            (Err(_), _) => (Vec::new(), Vec::new(), Vec::new(), String::new()),
        };
        SandboxReport {
            requested: self.config.mode,
            active,
            backends,
            network,
            network_isolated,
            writable,
            readable,
            hidden,
            environment,
        }
    }

    /// What commands under `backend` may reach on the network, and whether
    /// that counts as isolated.
    fn network(&self, backend: Backend) -> (String, bool) {
        let shared = self.config.network;
        match backend {
            Backend::Bubblewrap if shared => (
                "shared with the host (tools.sandbox.network: true)".to_owned(),
                false,
            ),
            Backend::Bubblewrap => (
                "isolated (a network namespace of its own, loopback only)".to_owned(),
                true,
            ),
            Backend::Docker if shared => (
                "Docker's bridge network (tools.sandbox.network: true)".to_owned(),
                false,
            ),
            Backend::Docker => ("isolated (--network none)".to_owned(), true),
            Backend::Landlock if shared => (
                "not restricted (tools.sandbox.network: true)".to_owned(),
                false,
            ),
            Backend::Landlock => match self.landlock_support() {
                Ok(support) if support.tcp_rules() => (
                    format!(
                        "TCP connect and bind blocked (Landlock ABI {}); UDP and Unix sockets are not restricted",
                        support.abi
                    ),
                    true,
                ),
                Ok(support) => (
                    format!(
                        "NOT restricted: Landlock ABI {} has no network rules (they need ABI 4, Linux 6.7)",
                        support.abi
                    ),
                    false,
                ),
                Err(_) => ("not restricted".to_owned(), false),
            },
            Backend::None => ("not restricted (no sandbox)".to_owned(), false),
        }
    }

    fn environment_description(&self, backend: Backend) -> String {
        let extra = if self.env_names.is_empty() {
            "tools.env adds none".to_owned()
        } else {
            format!("tools.env adds {}", self.env_names.join(", "))
        };
        match backend {
            Backend::Bubblewrap => format!(
                "cleared: only basic variables (PATH, LANG, TERM, TZ...) pass, HOME and TMPDIR are {BWRAP_HOME}; {extra}"
            ),
            Backend::Landlock => format!(
                "cleared: only basic variables (PATH, LANG, TERM, TZ...) pass, HOME is the workspace; {extra}"
            ),
            Backend::Docker => format!("the image's own; {extra} (docker run -e)"),
            Backend::None => {
                format!(
                    "cleared: only basic variables (PATH, HOME, LANG, TERM, TZ...) pass; {extra}"
                )
            }
        }
    }

    /// The variables of a command under `backend` whose `HOME` (Landlock)
    /// is `workspace`.
    fn command_env(&self, backend: Backend, workspace: &Path) -> Vec<(OsString, OsString)> {
        let host: Vec<(OsString, OsString)> = match &self.host_env {
            Some(vars) => vars.clone(),
            None => std::env::vars_os().collect(),
        };
        let mut env = Environment::default();
        for name in INHERITED_ENV {
            env.copy(&host, name);
        }
        match backend {
            Backend::Bubblewrap => {
                env.set("HOME", BWRAP_HOME);
                env.set("TMPDIR", BWRAP_HOME);
                for name in env::HOME_BOUND {
                    env.remove(name);
                }
            }
            Backend::Landlock => {
                env.set("HOME", workspace);
                for name in env::HOME_BOUND {
                    env.remove(name);
                }
            }
            Backend::Docker => {
                for name in env::DOCKER_CLIENT {
                    env.copy(&host, name);
                }
            }
            Backend::None => {}
        }
        for name in &self.env_names {
            env.copy(&host, name);
        }
        env.into_vars()
    }

    /// The `tools.env` names that are set, for `docker run -e NAME`.
    fn passed_names(&self) -> Vec<String> {
        let host: Vec<(OsString, OsString)> = match &self.host_env {
            Some(vars) => vars.clone(),
            None => std::env::vars_os().collect(),
        };
        self.env_names
            .iter()
            .filter(|name| env::lookup(&host, name).is_some())
            .cloned()
            .collect()
    }

    /// Starts `sh -c <command>` in `cwd` under the active sandbox, with
    /// `workspace` (and `tools.sandbox.writable`) writable.
    pub async fn spawn(
        &self,
        command: &str,
        cwd: &Path,
        workspace: &Path,
    ) -> Result<SandboxedChild, SandboxError> {
        let backend = self.active().await?;
        let cwd = std::fs::canonicalize(cwd)
            .ok()
            .filter(|dir| dir.is_dir())
            .ok_or_else(|| SandboxError::NoDirectory {
                path: cwd.to_path_buf(),
            })?;
        match backend {
            Backend::None => {
                let env = self.command_env(backend, workspace);
                let mut sh = base_command(Path::new("sh"), &["-c".into(), command.into()], &env);
                sh.current_dir(&cwd);
                start_child(sh, "sh", &cwd, None)
            }
            Backend::Bubblewrap => {
                let view = View::new(&self.config, workspace, &self.hidden)?;
                let env = self.command_env(backend, &view.writable[0]);
                let args = bwrap::args(&view, self.config.network, &cwd, command);
                let bwrap = base_command(&self.programs.bwrap, &args, &env);
                start_child(bwrap, "bwrap", &cwd, None)
            }
            Backend::Docker => {
                let view = View::new(&self.config, workspace, &self.hidden)?;
                let env = self.command_env(backend, &view.writable[0]);
                let name = format!(
                    "flynn-{}-{}",
                    std::process::id(),
                    CONTAINERS.fetch_add(1, Ordering::Relaxed) + 1
                );
                let user = current_user();
                let passed = self.passed_names();
                let readable: Vec<PathBuf> = view.readable.iter().map(|r| r.path.clone()).collect();
                let hidden = docker_hidden(&view);
                let args = docker::args(&docker::Run {
                    name: &name,
                    image: &self.config.docker_image,
                    network: self.config.network,
                    user,
                    mounts: &view.writable,
                    readable: &readable,
                    hidden: &hidden,
                    env: &passed,
                    cwd: &cwd,
                    command,
                })?;
                let docker = base_command(&self.programs.docker, &args, &env);
                let container = Container {
                    docker: self.programs.docker.clone(),
                    name,
                };
                start_child(docker, "docker", &cwd, Some(container))
            }
            Backend::Landlock => {
                let support = self.landlock_support().as_ref().map_err(|reason| {
                    SandboxError::Unavailable {
                        mode: Backend::Landlock,
                        reason: reason.clone(),
                        fix: Backend::Landlock.fix().to_owned(),
                    }
                })?;
                let view = View::new(&self.config, workspace, &self.hidden)?;
                if let Some(error) = view.landlock_conflict() {
                    return Err(error);
                }
                let env = self.command_env(backend, &view.writable[0]);
                let mut sh = base_command(Path::new("sh"), &["-c".into(), command.into()], &env);
                sh.current_dir(&cwd);
                let rules = landlock::Rules {
                    read: view.read_grants(),
                    writable: view.writable,
                    network: self.config.network,
                    support: *support,
                };
                landlock::spawn(sh, rules, cwd).await
            }
        }
    }
}

/// Logs [`Sandbox::startup_warning`] for `config` at WARN level: what the
/// daemon calls once when it starts.
pub async fn warn_if_unsandboxed(config: &ToolsConfig, paths: &SandboxPaths) {
    let sandbox = Sandbox::from_tools_config(config).with_paths(paths);
    if let Some(warning) = sandbox.startup_warning().await {
        tracing::warn!("{warning}");
    }
}

/// The hidden paths Docker must cover: those inside its mounts (the
/// container's system directories are the image's).
fn docker_hidden(view: &View) -> Vec<view::Hidden> {
    view.hidden
        .iter()
        .filter(|hidden| {
            view.writable
                .iter()
                .chain(view.readable.iter().map(|r| &r.path))
                .any(|dir| hidden.path.starts_with(dir))
        })
        .cloned()
        .collect()
}

fn writable_description(backend: Backend, view: Option<&View>) -> Vec<String> {
    let Some(view) = view.filter(|_| backend != Backend::None) else {
        return vec!["everything Flynn's user may write".to_owned()];
    };
    let mut out: Vec<String> = view
        .writable
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    match backend {
        Backend::Bubblewrap | Backend::Docker => {
            out.push("/tmp (private to each command)".to_owned());
        }
        Backend::Landlock => out.push("/dev/null and similar devices".to_owned()),
        Backend::None => {}
    }
    out
}

fn readable_description(backend: Backend, view: Option<&View>) -> Vec<String> {
    let Some(view) = view.filter(|_| backend != Backend::None) else {
        return vec!["everything Flynn's user may read".to_owned()];
    };
    let mut out = Vec::new();
    match backend {
        Backend::Docker => out.push("the image's file system".to_owned()),
        _ => {
            let dirs: Vec<String> = view
                .system
                .iter()
                .filter_map(|s| match s {
                    SystemPath::Dir(path) => Some(path.display().to_string()),
                    SystemPath::Link { .. } => None,
                })
                .collect();
            let links: Vec<String> = view
                .system
                .iter()
                .filter_map(|s| match s {
                    SystemPath::Link { path, target } => {
                        Some(format!("{} -> {}", path.display(), target.display()))
                    }
                    SystemPath::Dir(_) => None,
                })
                .collect();
            out.push(format!("{} (system, read-only)", dirs.join(", ")));
            if !links.is_empty() {
                out.push(format!("{} (symlinks as on the host)", links.join(", ")));
            }
        }
    }
    out.push("the writable directories".to_owned());
    for readable in &view.readable {
        out.push(match &readable.alias {
            Some(alias) => format!("{} (also as {})", readable.path.display(), alias.display()),
            None => readable.path.display().to_string(),
        });
    }
    match backend {
        Backend::Bubblewrap => out.push(
            "nothing else of the host ($HOME, FLYNN_HOME, /run, /var are not there)".to_owned(),
        ),
        Backend::Landlock => out.push(
            "nothing else of the host ($HOME, FLYNN_HOME, /proc, /tmp are refused)".to_owned(),
        ),
        Backend::Docker | Backend::None => {}
    }
    out
}

fn hidden_description(backend: Backend, view: Option<&View>) -> Vec<String> {
    let Some(view) = view else {
        return Vec::new();
    };
    let hidden = match backend {
        Backend::Docker => docker_hidden(view),
        Backend::None => Vec::new(),
        Backend::Bubblewrap | Backend::Landlock => view.hidden.clone(),
    };
    hidden
        .iter()
        .map(|h| h.path.display().to_string())
        .collect()
}

/// Picks the backend for `requested` from what is known about each (in
/// the order they were probed): a named mode must be available, `auto`
/// takes the first available in [`AUTO_ORDER`], and nothing at all
/// means none (which the report and the daemon's log shout about).
pub(crate) fn choose(
    requested: SandboxMode,
    known: &[(Backend, Availability)],
) -> Result<Backend, SandboxError> {
    let state = |backend: Backend| {
        known
            .iter()
            .find(|(b, _)| *b == backend)
            .map(|(_, availability)| availability)
    };
    let named = match requested {
        SandboxMode::Auto => {
            return Ok(AUTO_ORDER
                .into_iter()
                .find(|&backend| state(backend).is_some_and(Availability::is_available))
                .unwrap_or(Backend::None));
        }
        SandboxMode::None => return Ok(Backend::None),
        SandboxMode::Bubblewrap => Backend::Bubblewrap,
        SandboxMode::Docker => Backend::Docker,
        SandboxMode::Landlock => Backend::Landlock,
    };
    match state(named) {
        Some(Availability::Available { .. }) => Ok(named),
        Some(Availability::Unavailable { reason }) => Err(SandboxError::Unavailable {
            mode: named,
            reason: reason.clone(),
            fix: named.fix().to_owned(),
        }),
        None => Err(SandboxError::Unavailable {
            mode: named,
            reason: "it was not checked".to_owned(),
            fix: named.fix().to_owned(),
        }),
    }
}

#[cfg(unix)]
fn current_user() -> Option<(u32, u32)> {
    Some((
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    ))
}

#[cfg(not(unix))]
fn current_user() -> Option<(u32, u32)> {
    None
}

/// A command with the sandbox's plumbing: exactly the variables of `env`
/// (nothing of Flynn's own environment), no stdin, piped output, killed
/// on drop, and (on Unix) a process group of its own.
fn base_command(program: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    command
}

fn start_child(
    mut command: Command,
    program: &str,
    cwd: &Path,
    container: Option<Container>,
) -> Result<SandboxedChild, SandboxError> {
    let child = command.spawn().map_err(|e| SandboxError::Spawn {
        program: program.to_owned(),
        cwd: cwd.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(SandboxedChild::new(child, container))
}

/// Runs a probe command, bounded by `timeout`; `Err` says why it gave no
/// answer.
async fn run_probe(
    program: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<std::process::Output, String> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match tokio::time::timeout(timeout, command.output()).await {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(error)) => Err(format!("cannot run {}: {error}", program.display())),
        Err(_) => Err(format!(
            "`{} {}` did not answer within {}s",
            program.display(),
            args.join(" "),
            timeout.as_secs_f32()
        )),
    }
}

/// The first non-empty line of a probe's stderr, for a reason.
fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("no error message")
        .to_owned()
}

/// Why [`find_program`] found nothing.
fn not_found(program: &Path) -> String {
    if program.components().count() > 1 {
        format!("{} does not exist or is not executable", program.display())
    } else {
        format!("{} is not on PATH", program.display())
    }
}

/// Finds `program` on `PATH` (or checks it, when it is a path): the
/// executable file it names.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return is_executable(program).then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
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

/// A Docker container to stop when its command is abandoned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Container {
    docker: PathBuf,
    name: String,
}

/// Kills what a [`SandboxedChild`] started: its process group and, under
/// Docker, its container. Cheap to clone; killing twice is harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Killer {
    group: Option<u32>,
    container: Option<Container>,
}

impl Killer {
    /// Kills the process group and stops the container, if any.
    pub fn kill(&self) {
        self.kill_group();
        self.stop_container();
    }

    fn kill_group(&self) {
        #[cfg(unix)]
        if let Some(pid) = self
            .group
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // The group may already be gone; nothing to do then.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    /// `docker kill`, in the background: the client dying does not stop
    /// the container.
    fn stop_container(&self) {
        let Some(container) = &self.container else {
            return;
        };
        let child = std::process::Command::new(&container.docker)
            .args(["kill", &container.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Ok(mut child) = child {
            // Reap it without blocking whoever is dropping the command.
            let _ = std::thread::Builder::new()
                .name("flynn-docker-kill".to_owned())
                .spawn(move || child.wait());
        }
    }
}

/// A command started by a [`Sandbox`]: `sh` (or the sandbox program that
/// runs it) with piped output, leading a process group of its own. Dropping
/// it kills the whole group (and stops a Docker container that is still
/// running), so nothing it started outlives it.
#[derive(Debug)]
pub struct SandboxedChild {
    child: Child,
    killer: Killer,
    exited: bool,
}

impl SandboxedChild {
    fn new(child: Child, container: Option<Container>) -> Self {
        let killer = Killer {
            group: child.id(),
            container,
        };
        SandboxedChild {
            child,
            killer,
            exited: false,
        }
    }

    /// The process id of the direct child (`sh`, `bwrap` or `docker`),
    /// which is also its process group's id.
    pub fn id(&self) -> Option<u32> {
        self.killer.group
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Waits for the direct child to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait().await;
        if status.is_ok() {
            self.exited = true;
        }
        status
    }

    /// Something that kills this command from elsewhere.
    pub fn killer(&self) -> Killer {
        self.killer.clone()
    }

    /// Kills the whole process group (and the container) now.
    pub fn kill(&self) {
        self.killer.kill();
    }
}

impl Drop for SandboxedChild {
    fn drop(&mut self) {
        // Whatever the command left behind in its group goes too.
        self.killer.kill_group();
        if !self.exited {
            self.killer.stop_container();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
    fn auto_takes_the_first_available_in_order() {
        let all = [
            (Backend::Bubblewrap, available()),
            (Backend::Docker, available()),
            (Backend::Landlock, available()),
            (Backend::None, available()),
        ];
        assert_eq!(choose(SandboxMode::Auto, &all), Ok(Backend::Bubblewrap));
        let no_bwrap = [
            (Backend::Bubblewrap, missing("no bwrap")),
            (Backend::Docker, available()),
        ];
        assert_eq!(choose(SandboxMode::Auto, &no_bwrap), Ok(Backend::Docker));
        let only_landlock = [
            (Backend::Bubblewrap, missing("no bwrap")),
            (Backend::Docker, missing("no engine")),
            (Backend::Landlock, available()),
        ];
        assert_eq!(
            choose(SandboxMode::Auto, &only_landlock),
            Ok(Backend::Landlock)
        );
        let nothing = [
            (Backend::Bubblewrap, missing("no bwrap")),
            (Backend::Docker, missing("no engine")),
            (Backend::Landlock, missing("old kernel")),
        ];
        assert_eq!(choose(SandboxMode::Auto, &nothing), Ok(Backend::None));
        assert_eq!(choose(SandboxMode::Auto, &[]), Ok(Backend::None));
    }

    #[test]
    fn a_named_mode_must_be_available() {
        let known = [
            (Backend::Bubblewrap, missing("bwrap is not on PATH")),
            (Backend::Docker, available()),
            (Backend::Landlock, available()),
        ];
        assert_eq!(choose(SandboxMode::Docker, &known), Ok(Backend::Docker));
        assert_eq!(choose(SandboxMode::Landlock, &known), Ok(Backend::Landlock));
        assert_eq!(choose(SandboxMode::None, &[]), Ok(Backend::None));
        let error = choose(SandboxMode::Bubblewrap, &known).unwrap_err();
        assert!(error.is_unavailable());
        assert_eq!(
            error.to_string(),
            "tools.sandbox.mode is bubblewrap, but bwrap is not on PATH; install bubblewrap \
             (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`) \
             or set tools.sandbox.mode to auto or none"
        );
    }

    #[test]
    fn programs_are_found_on_path_or_by_path() {
        assert_eq!(find_program(Path::new("/nonexistent/bwrap")), None);
        assert_eq!(find_program(Path::new("flynn-no-such-program")), None);
        let sh = find_program(Path::new("sh")).unwrap();
        assert!(sh.is_absolute(), "{}", sh.display());
        assert_eq!(find_program(&sh), Some(sh));
    }
}
