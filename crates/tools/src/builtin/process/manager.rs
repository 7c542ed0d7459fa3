use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use flynn_protocol::SessionKey;
use flynn_protocol::config::ProcessToolConfig;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use super::ring::Ring;
use crate::ToolError;
use crate::sandbox::{Killer, Sandbox, SandboxedChild};

/// Finished processes remembered (for their status and output) per
/// manager; older ones are forgotten.
const MAX_FINISHED: usize = 32;

/// How long the output readers may take to drain the pipes once the
/// process is gone, before its status is published anyway.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How long a kill or the shutdown waits for processes to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Background processes started by `process.start`: each runs `sh -c` in
/// the sandbox, in a process group of its own, belongs to the session that
/// started it, keeps its recent output in a ring buffer, and is killed
/// (with its group) when asked, when it runs longer than
/// `tools.process.max_runtime_secs`, at [`ProcessManager::shutdown`], and
/// when the manager is dropped.
pub struct ProcessManager {
    sandbox: Arc<Sandbox>,
    max_processes: usize,
    max_per_session: usize,
    max_runtime: Duration,
    buffer_bytes: usize,
    state: Mutex<State>,
    tasks: TaskTracker,
    lifetime: ProcessLifetime,
}

/// How long background processes may outlive the call that started them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProcessLifetime {
    /// Until killed, `tools.process.max_runtime_secs`, or the runtime's
    /// shutdown: a daemon, running for days.
    #[default]
    Runtime,
    /// The runtime serves one command and exits with it (the CLI's
    /// embedded `flynn send`): every process ends when the command does,
    /// right after the answer, and the model is told so.
    Command,
}

impl fmt::Debug for ProcessManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessManager")
            .field("max_processes", &self.max_processes)
            .field("max_per_session", &self.max_per_session)
            .field("max_runtime", &self.max_runtime)
            .field("buffer_bytes", &self.buffer_bytes)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Starts between their slot check and their entry, by session.
    starting: Vec<SessionKey>,
    shut_down: bool,
    /// Oldest first.
    entries: Vec<Entry>,
}

struct Entry {
    id: String,
    session: SessionKey,
    command: String,
    cwd: PathBuf,
    pid: u32,
    started: Instant,
    shared: Arc<Shared>,
    /// Asks the supervisor to kill it; taken by the first kill.
    stop: Option<oneshot::Sender<KillReason>>,
    killer: Killer,
}

impl Entry {
    fn running(&self) -> bool {
        self.shared.status.borrow().is_running()
    }

    fn info(&self) -> ProcessInfo {
        let status = self.shared.status.borrow().clone();
        ProcessInfo {
            id: self.id.clone(),
            pid: self.pid,
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            running_for: self.started.elapsed(),
            status,
        }
    }
}

/// What the supervisor and the output readers share with the manager.
struct Shared {
    output: Mutex<Ring>,
    status: watch::Sender<ProcessStatus>,
}

/// Why a background process was killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// `process.kill`.
    Requested,
    /// It ran for `tools.process.max_runtime_secs`.
    MaxRuntime,
    /// Flynn shut down.
    Shutdown,
}

/// The state of a background process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessStatus {
    Running,
    Exited {
        code: i32,
        after: Duration,
    },
    /// Ended by a signal nobody here sent.
    Signalled {
        signal: i32,
        after: Duration,
    },
    Killed {
        reason: KillReason,
        after: Duration,
    },
    /// Waiting for it failed; it is no longer watched.
    Lost {
        message: String,
    },
}

impl ProcessStatus {
    pub fn is_running(&self) -> bool {
        matches!(self, ProcessStatus::Running)
    }
}

/// One background process as the tools report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// `p1`, `p2`, ...
    pub id: String,
    pub pid: u32,
    pub command: String,
    pub cwd: PathBuf,
    /// Since it started (still counting after it ended).
    pub running_for: Duration,
    pub status: ProcessStatus,
}

impl fmt::Display for ProcessInfo {
    /// One line: `p1 (pid 4242) running for 3s: npm run dev`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (pid {}) ", self.id, self.pid)?;
        match &self.status {
            ProcessStatus::Running => write!(f, "running for {}", secs(self.running_for))?,
            ProcessStatus::Exited { code, after } => {
                write!(f, "exited with code {code} after {}", secs(*after))?;
            }
            ProcessStatus::Signalled { signal, after } => {
                write!(f, "killed by signal {signal} after {}", secs(*after))?;
            }
            ProcessStatus::Killed { reason, after } => match reason {
                KillReason::Requested => {
                    write!(f, "killed by process.kill after {}", secs(*after))?
                }
                KillReason::MaxRuntime => write!(
                    f,
                    "killed after {}, the limit (tools.process.max_runtime_secs)",
                    secs(*after)
                )?,
                KillReason::Shutdown => write!(f, "killed at shutdown after {}", secs(*after))?,
            },
            ProcessStatus::Lost { message } => write!(f, "lost ({message})")?,
        }
        write!(f, ": {}", short_command(&self.command))
    }
}

fn secs(duration: Duration) -> String {
    format!("{}s", duration.as_secs())
}

/// The command's first line, cut to a readable length.
fn short_command(command: &str) -> String {
    const MAX: usize = 120;
    let line = command.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(MAX).collect();
    if short.len() < command.len() {
        short.push('…');
    }
    short
}

/// The recent output of a process, from [`ProcessManager::output`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentOutput {
    pub text: String,
    /// Bytes written before `text` that are not in it (dropped from the
    /// ring buffer, or beyond the requested size).
    pub earlier: u64,
    /// Of `earlier`, those still in the buffer (a larger request shows
    /// them).
    pub in_buffer: usize,
}

impl ProcessManager {
    pub fn new(config: &ProcessToolConfig, sandbox: Arc<Sandbox>) -> Self {
        ProcessManager {
            sandbox,
            max_processes: config.max_processes,
            max_per_session: config.max_per_session,
            max_runtime: Duration::from_secs(config.max_runtime_secs),
            buffer_bytes: config.buffer_bytes,
            state: Mutex::new(State::default()),
            tasks: TaskTracker::new(),
            lifetime: ProcessLifetime::Runtime,
        }
    }

    /// This manager, with processes that live as `lifetime` says.
    #[must_use]
    pub fn with_lifetime(mut self, lifetime: ProcessLifetime) -> Self {
        self.lifetime = lifetime;
        self
    }

    pub fn lifetime(&self) -> ProcessLifetime {
        self.lifetime
    }

    /// Every process still running, of any session, oldest first.
    pub fn running(&self) -> Vec<ProcessInfo> {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.running())
            .map(Entry::info)
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        flynn_protocol::sync::lock(&self.state)
    }

    /// Starts `sh -c <command>` in `cwd` under the sandbox, owned by
    /// `session`.
    pub async fn start(
        &self,
        session: &SessionKey,
        command: &str,
        cwd: &Path,
        workspace: &Path,
    ) -> Result<ProcessInfo, ToolError> {
        let id = {
            let mut state = self.lock();
            if state.shut_down {
                return Err(ToolError::failed(
                    "background processes are stopped: Flynn is shutting down",
                ));
            }
            let running =
                state.entries.iter().filter(|e| e.running()).count() + state.starting.len();
            if running >= self.max_processes {
                return Err(ToolError::failed(format!(
                    "cannot start another background process: {running} are running, the limit \
                     (tools.process.max_processes); stop one with process.kill or wait for one to end"
                )));
            }
            let mine = state
                .entries
                .iter()
                .filter(|e| &e.session == session && e.running())
                .count()
                + state.starting.iter().filter(|s| *s == session).count();
            if mine >= self.max_per_session {
                return Err(ToolError::failed(format!(
                    "cannot start another background process: this session runs {mine}, the limit \
                     per session (tools.process.max_per_session); stop one with process.kill or wait \
                     for one to end"
                )));
            }
            state.starting.push(session.clone());
            state.next_id += 1;
            format!("p{}", state.next_id)
        };
        let slot = Slot {
            manager: self,
            session,
            held: true,
        };
        let mut child = self.sandbox.spawn(command, cwd, workspace).await?;
        let started = Instant::now();
        let pid = child.id().unwrap_or_default();
        let shared = Arc::new(Shared {
            output: Mutex::new(Ring::new(self.buffer_bytes)),
            status: watch::Sender::new(ProcessStatus::Running),
        });
        let mut readers = Vec::new();
        if let Some(stdout) = child.take_stdout() {
            readers.push(self.tasks.spawn(read_into(stdout, shared.clone())));
        }
        if let Some(stderr) = child.take_stderr() {
            readers.push(self.tasks.spawn(read_into(stderr, shared.clone())));
        }
        let killer = child.killer();
        let (stop, stopped) = oneshot::channel();
        self.tasks.spawn(supervise(
            child,
            shared.clone(),
            stopped,
            self.max_runtime,
            readers,
            started,
        ));
        let entry = Entry {
            id,
            session: session.clone(),
            command: command.to_owned(),
            cwd: cwd.to_path_buf(),
            pid,
            started,
            shared,
            stop: Some(stop),
            killer,
        };
        let info = entry.info();
        let mut state = self.lock();
        slot.release(&mut state);
        if state.shut_down {
            // Shut down while it was starting: it does not get to run.
            if let Some(stop) = entry.stop {
                let _ = stop.send(KillReason::Shutdown);
            }
            return Err(ToolError::failed(
                "background processes are stopped: Flynn is shutting down",
            ));
        }
        state.entries.push(entry);
        forget_old(&mut state.entries);
        Ok(info)
    }

    /// One process of `session`, after waiting up to `wait` for it to
    /// exit.
    pub async fn status(
        &self,
        session: &SessionKey,
        id: &str,
        wait: Duration,
    ) -> Result<ProcessInfo, ToolError> {
        let mut status = self.with_entry(session, id, |e| e.shared.status.subscribe())?;
        if !wait.is_zero() {
            let _ = tokio::time::timeout(wait, status.wait_for(|s| !s.is_running())).await;
        }
        self.with_entry(session, id, Entry::info)
    }

    /// The last `max_bytes` of a process's combined stdout and stderr.
    pub fn output(
        &self,
        session: &SessionKey,
        id: &str,
        max_bytes: usize,
    ) -> Result<RecentOutput, ToolError> {
        let ((mut tail, mut in_buffer), dropped) = self.with_entry(session, id, |e| {
            let ring = flynn_protocol::sync::lock(&e.shared.output);
            (ring.tail(max_bytes), ring.dropped())
        })?;
        // Start on a character boundary (a cut can split one).
        let partial = tail
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        if partial > 0 && partial < tail.len() {
            tail.drain(..partial);
            in_buffer += partial;
        }
        Ok(RecentOutput {
            text: String::from_utf8_lossy(&tail).into_owned(),
            earlier: dropped + in_buffer as u64,
            in_buffer,
        })
    }

    /// Kills a process of `session` with its process group, and waits
    /// (bounded) until it is reaped. A process that already ended is left
    /// as it was.
    pub async fn kill(&self, session: &SessionKey, id: &str) -> Result<ProcessInfo, ToolError> {
        let (stop, mut status) = self.with_entry_mut(session, id, |e| {
            (e.stop.take(), e.shared.status.subscribe())
        })?;
        if let Some(stop) = stop {
            let _ = stop.send(KillReason::Requested);
        }
        let _ = tokio::time::timeout(KILL_WAIT, status.wait_for(|s| !s.is_running())).await;
        self.with_entry(session, id, Entry::info)
    }

    /// The processes of `session`, oldest first.
    pub fn list(&self, session: &SessionKey) -> Vec<ProcessInfo> {
        self.lock()
            .entries
            .iter()
            .filter(|e| &e.session == session)
            .map(Entry::info)
            .collect()
    }

    /// Kills every process and waits (bounded) for them and their output
    /// readers; later starts are refused. Calling it again does nothing.
    pub async fn shutdown(&self) {
        let waits: Vec<_> = {
            let mut state = self.lock();
            state.shut_down = true;
            state
                .entries
                .iter_mut()
                .filter_map(|e| {
                    let stop = e.stop.take()?;
                    let _ = stop.send(KillReason::Shutdown);
                    Some(e.shared.status.subscribe())
                })
                .collect()
        };
        let all_reaped =
            futures::future::join_all(waits.into_iter().map(|mut status| async move {
                let _ = status.wait_for(|s| !s.is_running()).await;
            }));
        let _ = tokio::time::timeout(KILL_WAIT, all_reaped).await;
        self.tasks.close();
        let _ = tokio::time::timeout(KILL_WAIT, self.tasks.wait()).await;
    }

    fn with_entry<T>(
        &self,
        session: &SessionKey,
        id: &str,
        f: impl FnOnce(&Entry) -> T,
    ) -> Result<T, ToolError> {
        self.with_entry_mut(session, id, |e| f(e))
    }

    fn with_entry_mut<T>(
        &self,
        session: &SessionKey,
        id: &str,
        f: impl FnOnce(&mut Entry) -> T,
    ) -> Result<T, ToolError> {
        let mut state = self.lock();
        // Another session's process is as invisible as a missing one.
        match state
            .entries
            .iter_mut()
            .find(|e| e.id == id && &e.session == session)
        {
            Some(entry) => Ok(f(entry)),
            None => Err(ToolError::failed(format!(
                "no background process '{id}' in this session (process.list shows them)"
            ))),
        }
    }
}

impl Drop for ProcessManager {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for entry in &state.entries {
            if entry.running() {
                entry.killer.kill();
            }
        }
    }
}

/// A reserved place under `max_processes` (and the session's
/// `max_per_session`) while a process starts; given back if the start
/// fails.
struct Slot<'a> {
    manager: &'a ProcessManager,
    session: &'a SessionKey,
    held: bool,
}

impl Slot<'_> {
    fn release(mut self, state: &mut State) {
        unreserve(state, self.session);
        self.held = false;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.held {
            let mut state = self.manager.lock();
            unreserve(&mut state, self.session);
        }
    }
}

fn unreserve(state: &mut State, session: &SessionKey) {
    if let Some(at) = state.starting.iter().position(|s| s == session) {
        state.starting.swap_remove(at);
    }
}

/// Drops the oldest finished entries beyond [`MAX_FINISHED`].
fn forget_old(entries: &mut Vec<Entry>) {
    let finished = entries.iter().filter(|e| !e.running()).count();
    let mut excess = finished.saturating_sub(MAX_FINISHED);
    entries.retain(|e| {
        if excess > 0 && !e.running() {
            excess -= 1;
            false
        } else {
            true
        }
    });
}

async fn read_into(mut pipe: impl AsyncRead + Unpin, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 16 * 1024];
    // A read error ends the reading; what was read stays.
    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
        flynn_protocol::sync::lock(&shared.output).push(&buf[..n]);
    }
}

/// Owns the child: waits for it to exit, or kills it when asked or when it
/// runs too long; then kills what is left of its group, lets the readers
/// drain the pipes, and publishes the final status.
async fn supervise(
    mut child: SandboxedChild,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<KillReason>,
    max_runtime: Duration,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
) {
    let status = tokio::select! {
        exit = child.wait() => match exit {
            Ok(exit) => exit_status(exit, started.elapsed()),
            Err(error) => ProcessStatus::Lost { message: format!("cannot wait for it: {error}") },
        },
        // A dropped sender means the manager is gone.
        reason = &mut stop => kill(&mut child, reason.unwrap_or(KillReason::Shutdown), started).await,
        () = tokio::time::sleep(max_runtime) => kill(&mut child, KillReason::MaxRuntime, started).await,
    };
    // Whatever it left running in its group goes too, closing the pipes.
    drop(child);
    let _ = tokio::time::timeout(DRAIN_GRACE, futures::future::join_all(readers)).await;
    shared.status.send_replace(status);
}

async fn kill(child: &mut SandboxedChild, reason: KillReason, started: Instant) -> ProcessStatus {
    child.kill();
    let after = started.elapsed();
    match child.wait().await {
        Ok(_) => ProcessStatus::Killed { reason, after },
        Err(error) => ProcessStatus::Lost {
            message: format!("killed, but cannot wait for it: {error}"),
        },
    }
}

fn exit_status(exit: std::process::ExitStatus, after: Duration) -> ProcessStatus {
    if let Some(code) = exit.code() {
        return ProcessStatus::Exited { code, after };
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = exit.signal() {
            return ProcessStatus::Signalled { signal, after };
        }
    }
    ProcessStatus::Lost {
        message: format!("it ended with {exit}"),
    }
}
