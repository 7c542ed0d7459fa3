//! The browsers: one Chromium process per session that uses the browser,
//! each with its own profile and its own guarding proxy, started on first
//! use, closed when idle, at shutdown, or to make room.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use flynn_protocol::SessionKey;
use flynn_protocol::config::BrowserToolConfig;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::json;
use tokio::process::Child;
use tokio::task::JoinHandle;

use super::cdp::{self, CdpError, Connection, Page};
use super::proxy::Proxy;
use super::snapshot::Ref;
use crate::ToolError;
use crate::builtin::web::guard::Guard;

/// Program names looked for on `PATH`, in this order.
pub(crate) const PROGRAMS: [&str; 5] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
];

/// How long Chromium may take to start and answer its first command.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a graceful close may take before the process is killed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The headless browser's window.
const WINDOW: (u32, u32) = (1280, 800);

/// Settings every session's browser shares.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) executable: Option<PathBuf>,
    pub(crate) idle: Duration,
    pub(crate) timeout: Duration,
    pub(crate) max_output: usize,
    pub(crate) max_browsers: usize,
    pub(crate) guard: Arc<Guard>,
}

/// The browsers of one runtime: at most one per session, each closed
/// after `tools.browser.idle_secs` unused and all of them at
/// [`shutdown`](Self::shutdown). Every `browser.*` tool holds the same
/// one; a session's calls take turns on its browser.
#[derive(Debug, Clone)]
pub struct Browsers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    /// `FLYNN_HOME/browser`: a profile directory per session inside.
    root: PathBuf,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    shut: AtomicBool,
}

/// One session's browser, or its absence; the async lock serialises the
/// session's calls.
#[derive(Debug)]
pub(crate) struct Slot {
    state: Arc<tokio::sync::Mutex<Option<Running>>>,
    last_used: Mutex<Instant>,
    running: AtomicBool,
}

/// A session's browser for the length of one call.
pub(crate) struct Lease {
    slot: Arc<Slot>,
    state: tokio::sync::OwnedMutexGuard<Option<Running>>,
    /// Said before the call's output: the browser was restarted.
    pub(crate) note: Option<String>,
}

impl Lease {
    pub(crate) fn running(&mut self) -> Result<&mut Running, ToolError> {
        self.state
            .as_mut()
            .ok_or_else(|| ToolError::failed("the browser did not start"))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *lock(&self.slot.last_used) = Instant::now();
        // A browser that died during the call is not lent again.
        if self.state.as_mut().is_some_and(|running| !running.alive())
            && let Some(gone) = self.state.take()
        {
            self.slot.running.store(false, Ordering::SeqCst);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(gone.kill());
            }
        }
    }
}

/// A started browser and what the tools keep between calls.
pub(crate) struct Running {
    child: Child,
    connection: Connection,
    pub(crate) page: Page,
    pub(crate) proxy: Proxy,
    /// What the latest snapshot's numbers stand for, and on which
    /// document.
    pub(crate) refs: Option<Refs>,
    pid: Option<u32>,
    /// Where downloads go now.
    downloads: Option<PathBuf>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("pid", &self.pid)
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

/// The numbers of one snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Refs {
    /// The main frame's loader when the snapshot was taken: another one
    /// means the page navigated since.
    pub(crate) loader: String,
    pub(crate) refs: Vec<Ref>,
}

impl Browsers {
    /// Browsers configured by `tools.browser`, with their profiles under
    /// `root` (`FLYNN_HOME/browser`). Nothing starts until a tool needs
    /// a browser.
    pub fn new(config: &BrowserToolConfig, root: impl Into<PathBuf>) -> Self {
        Browsers {
            inner: Arc::new(Inner {
                settings: Settings {
                    executable: config.executable.clone(),
                    idle: Duration::from_secs(config.idle_secs),
                    timeout: Duration::from_secs(config.timeout_secs.max(1)),
                    max_output: config.max_output_bytes.max(256),
                    max_browsers: config.max_browsers.max(1),
                    guard: Arc::new(Guard::new(&config.allow_private)),
                },
                root: root.into(),
                slots: Mutex::new(HashMap::new()),
                reaper: Mutex::new(None),
                shut: AtomicBool::new(false),
            }),
        }
    }

    /// Like [`new`](Self::new), with the idle time given directly (tests
    /// and benchmarks use fractions of a second).
    pub fn with_idle(config: &BrowserToolConfig, root: impl Into<PathBuf>, idle: Duration) -> Self {
        let mut browsers = Self::new(config, root);
        if let Some(inner) = Arc::get_mut(&mut browsers.inner) {
            inner.settings.idle = idle;
        }
        browsers
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The profile directory of `session`.
    pub fn profile_dir(&self, session: &SessionKey) -> PathBuf {
        self.inner.root.join(profile_name(session.as_str()))
    }

    /// The process id of `session`'s browser while one runs.
    pub async fn pid(&self, session: &SessionKey) -> Option<u32> {
        let slot = self.existing(session)?;
        let state = slot.state.lock().await;
        state.as_ref().and_then(|running| running.pid)
    }

    /// Whether `session` has a browser running (without waiting for a
    /// call in progress).
    pub fn is_running(&self, session: &SessionKey) -> bool {
        self.existing(session)
            .is_some_and(|slot| slot.running.load(Ordering::SeqCst))
    }

    fn existing(&self, session: &SessionKey) -> Option<Arc<Slot>> {
        lock(&self.inner.slots).get(session.as_str()).cloned()
    }

    fn slot(&self, session: &SessionKey) -> Arc<Slot> {
        lock(&self.inner.slots)
            .entry(session.as_str().to_owned())
            .or_insert_with(|| {
                Arc::new(Slot {
                    state: Arc::new(tokio::sync::Mutex::new(None)),
                    last_used: Mutex::new(Instant::now()),
                    running: AtomicBool::new(false),
                })
            })
            .clone()
    }

    /// `session`'s browser, started first when none runs (or it died),
    /// for one call: the session's other calls wait until the lease is
    /// dropped.
    pub(crate) async fn lease(
        &self,
        session: &SessionKey,
        workspace: &Path,
    ) -> Result<Lease, ToolError> {
        if self.inner.shut.load(Ordering::SeqCst) {
            return Err(ToolError::failed(
                "the browser is not available: Flynn is shutting down",
            ));
        }
        let slot = self.slot(session);
        let mut state = Arc::clone(&slot.state).lock_owned().await;
        let mut note = None;
        if let Some(running) = state.as_mut()
            && !running.alive()
        {
            if let Some(gone) = state.take() {
                gone.kill().await;
            }
            slot.running.store(false, Ordering::SeqCst);
            note = Some(
                "Note: this session's browser had stopped (it crashed or was killed) and was \
                 started again; the page that was open and anything typed into it are gone."
                    .to_owned(),
            );
        }
        if state.is_none() {
            self.make_room(session).await;
            let running = self.launch(session).await?;
            *state = Some(running);
            slot.running.store(true, Ordering::SeqCst);
            self.start_reaper();
        }
        *lock(&slot.last_used) = Instant::now();
        if let Some(running) = state.as_mut() {
            running.set_downloads(workspace).await;
        }
        Ok(Lease { slot, state, note })
    }

    /// Closes `session`'s browser, if one runs; says whether one did.
    pub async fn close(&self, session: &SessionKey) -> bool {
        let Some(slot) = self.existing(session) else {
            return false;
        };
        let mut state = slot.state.lock().await;
        let Some(running) = state.take() else {
            return false;
        };
        slot.running.store(false, Ordering::SeqCst);
        running.close().await;
        true
    }

    /// Closes every browser; later calls are refused.
    pub async fn shutdown(&self) {
        self.inner.shut.store(true, Ordering::SeqCst);
        if let Some(reaper) = lock(&self.inner.reaper).take() {
            reaper.abort();
        }
        let slots: Vec<Arc<Slot>> = lock(&self.inner.slots).values().cloned().collect();
        futures::future::join_all(slots.into_iter().map(|slot| async move {
            let mut state = slot.state.lock().await;
            if let Some(running) = state.take() {
                slot.running.store(false, Ordering::SeqCst);
                running.close().await;
            }
        }))
        .await;
    }

    /// Closes the browser unused longest while `max_browsers` run. Only
    /// a browser no call is using can go (waiting for a busy one could
    /// deadlock with its own session starting a browser too), so a burst
    /// of sessions may briefly run more.
    async fn make_room(&self, session: &SessionKey) {
        let mut others: Vec<(Instant, Arc<Slot>)> = lock(&self.inner.slots)
            .iter()
            .filter(|(key, slot)| {
                key.as_str() != session.as_str() && slot.running.load(Ordering::SeqCst)
            })
            .map(|(_, slot)| (*lock(&slot.last_used), Arc::clone(slot)))
            .collect();
        if others.len() < self.inner.settings.max_browsers {
            return;
        }
        others.sort_by_key(|(used, _)| *used);
        for (_, slot) in others {
            let Ok(mut state) = Arc::clone(&slot.state).try_lock_owned() else {
                continue;
            };
            if let Some(running) = state.take() {
                slot.running.store(false, Ordering::SeqCst);
                running.close().await;
                return;
            }
        }
    }

    /// Starts the task that closes idle browsers, unless it runs.
    fn start_reaper(&self) {
        let mut reaper = lock(&self.inner.reaper);
        if reaper.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let tick = (self.inner.settings.idle / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(30));
        *reaper = Some(tokio::spawn(reap(weak, tick)));
    }

    async fn launch(&self, session: &SessionKey) -> Result<Running, ToolError> {
        let settings = &self.inner.settings;
        let executable = find_executable(settings.executable.as_deref())?;
        let profile = self.profile_dir(session);
        private_dir(&self.inner.root)?;
        private_dir(&profile)?;
        let proxy = Proxy::start(Arc::clone(&settings.guard), settings.timeout)
            .await
            .map_err(|error| {
                ToolError::failed(format!(
                    "cannot start the browser's network guard on loopback: {error}"
                ))
            })?;
        let mut args: Vec<OsString> = chromium_args(&proxy.url())
            .into_iter()
            .map(|(name, value)| match value {
                Some(value) => format!("--{name}={value}").into(),
                None => format!("--{name}").into(),
            })
            .collect();
        let mut profile_arg = OsString::from("--user-data-dir=");
        profile_arg.push(&profile);
        args.push(profile_arg);
        args.push(format!("--window-size={},{}", WINDOW.0, WINDOW.1).into());
        if running_as_root() {
            // Chromium refuses to run as root with its sandbox.
            args.extend(["--no-sandbox".into(), "--disable-setuid-sandbox".into()]);
        }
        // The first tab, which the tools use.
        args.push("about:blank".into());
        let cannot_start = |error: String| {
            ToolError::failed(format!(
                "cannot start the browser {}: {error}; check that it runs (`{} --headless --version`), \
                 or set tools.browser.executable",
                executable.display(),
                executable.display()
            ))
        };
        let mut launched = cdp::launch(&executable, args, settings.timeout)
            .map_err(|error| cannot_start(error.to_string()))?;
        let pid = launched.child.id();
        let page =
            match tokio::time::timeout(LAUNCH_TIMEOUT, first_page(&launched.connection)).await {
                Ok(Ok(page)) => page,
                failed => {
                    let _ = launched.child.kill().await;
                    let error = match failed {
                        Ok(Err(error)) => error.to_string(),
                        _ => format!("it did not answer within {LAUNCH_TIMEOUT:?}"),
                    };
                    let said = launched.last_words().await;
                    return Err(cannot_start(if said.is_empty() {
                        error
                    } else {
                        format!("{error} (it said: {})", said.join(" / "))
                    }));
                }
            };
        let cdp::Launched {
            child, connection, ..
        } = launched;
        Ok(Running {
            child,
            connection,
            page,
            proxy,
            refs: None,
            pid,
            downloads: None,
        })
    }
}

/// Closes idle browsers every `tick` while any runs.
async fn reap(inner: Weak<Inner>, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let slots: Vec<Arc<Slot>> = lock(&inner.slots).values().cloned().collect();
        let mut any = false;
        for slot in slots {
            if !slot.running.load(Ordering::SeqCst) {
                continue;
            }
            any = true;
            if lock(&slot.last_used).elapsed() < inner.settings.idle {
                continue;
            }
            // A call in progress is not idle.
            let Ok(mut state) = slot.state.try_lock() else {
                continue;
            };
            if let Some(running) = state.take() {
                slot.running.store(false, Ordering::SeqCst);
                tracing::debug!("browser: closing an idle browser");
                running.close().await;
            }
        }
        if !any {
            // Restarted with the next browser.
            return;
        }
    }
}

/// The tab the browser opened at start (`about:blank`), or a new one,
/// attached as a flattened session with its page and lifecycle events on.
async fn first_page(connection: &Connection) -> Result<Page, CdpError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Targets {
        target_infos: Vec<Target>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Target {
        target_id: String,
        #[serde(rename = "type")]
        kind: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Attached {
        session_id: String,
    }
    // Answered once the browser has started.
    let targets: Targets = connection
        .call_within(LAUNCH_TIMEOUT, "Target.getTargets", json!({}))
        .await?;
    let target = match targets.target_infos.into_iter().find(|t| t.kind == "page") {
        Some(target) => target.target_id,
        None => {
            connection
                .call::<Target>("Target.createTarget", json!({"url": "about:blank"}))
                .await?
                .target_id
        }
    };
    let attached: Attached = connection
        .call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        )
        .await?;
    let page = connection.page(attached.session_id);
    page.call::<IgnoredAny>("Page.enable", json!({})).await?;
    page.call::<IgnoredAny>("Page.setLifecycleEventsEnabled", json!({"enabled": true}))
        .await?;
    Ok(page)
}

impl Running {
    /// Whether the process and its DevTools connection are still there.
    pub(crate) fn alive(&mut self) -> bool {
        self.connection.is_open() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Points downloads at `<workspace>/downloads`.
    async fn set_downloads(&mut self, workspace: &Path) {
        let dir = workspace.join("downloads");
        if self.downloads.as_ref() == Some(&dir) {
            return;
        }
        let params = json!({
            "behavior": "allow",
            "downloadPath": dir.display().to_string(),
            "eventsEnabled": true,
        });
        match self
            .connection
            .call::<IgnoredAny>("Browser.setDownloadBehavior", params)
            .await
        {
            Ok(_) => self.downloads = Some(dir),
            Err(error) => tracing::debug!(%error, "browser: cannot set the download directory"),
        }
    }

    /// Where downloads go.
    pub(crate) fn downloads(&self) -> Option<&Path> {
        self.downloads.as_deref()
    }

    /// The connection to the browser itself (its own events: downloads).
    pub(crate) fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Closes the browser gracefully (so the profile, cookies included,
    /// is written out), or kills it.
    pub(crate) async fn close(mut self) {
        let graceful = tokio::time::timeout(CLOSE_TIMEOUT, async {
            // The answer may not come: the browser closes the pipe as it
            // exits.
            let _ = self
                .connection
                .call::<IgnoredAny>("Browser.close", json!({}))
                .await;
            self.child.wait().await.ok()
        })
        .await;
        if !matches!(graceful, Ok(Some(_))) {
            let _ = self.child.kill().await;
        }
    }

    /// Kills the process (it is dead or unusable already).
    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Chromium's switches (name, value), without their leading `--`:
/// headless, no background traffic of its own, every request through
/// `proxy`.
fn chromium_args(proxy: &str) -> Vec<(&'static str, Option<String>)> {
    let mut args: Vec<(&'static str, Option<String>)> = [
        "headless",
        "disable-gpu",
        "disable-background-networking",
        "disable-component-update",
        "disable-sync",
        "no-first-run",
        "no-default-browser-check",
        "disable-default-apps",
        "disable-extensions",
        "disable-breakpad",
        "disable-crash-reporter",
        "disable-client-side-phishing-detection",
        "disable-domain-reliability",
        "metrics-recording-only",
        "disable-dev-shm-usage",
        "hide-scrollbars",
        "mute-audio",
        "use-mock-keychain",
    ]
    .into_iter()
    .map(|name| (name, None))
    .collect();
    args.extend([
        ("password-store", Some("basic".to_owned())),
        // WebRTC's UDP would bypass the proxy.
        (
            "force-webrtc-ip-handling-policy",
            Some("disable_non_proxied_udp".to_owned()),
        ),
        (
            "webrtc-ip-handling-policy",
            Some("disable_non_proxied_udp".to_owned()),
        ),
        ("proxy-server", Some(proxy.to_owned())),
        // Without this, loopback addresses bypass any proxy.
        ("proxy-bypass-list", Some("<-loopback>".to_owned())),
    ]);
    args
}

fn running_as_root() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
            || std::env::var_os("USER").is_some_and(|user| user == "root")
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Creates `dir` (and its parents) readable by the owner only, and
/// tightens it if it exists with wider permissions.
fn private_dir(dir: &Path) -> Result<(), ToolError> {
    let failed = |error: std::io::Error| {
        ToolError::failed(format!(
            "cannot create the browser profile directory {}: {error}",
            dir.display()
        ))
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(failed)?;
        let meta = std::fs::metadata(dir).map_err(failed)?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(failed)?;
        }
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir).map_err(failed)?;
    Ok(())
}

/// A directory name for a session key: its safe characters, and a hash of
/// the whole key so that `a:b` and `a_b` stay apart.
pub(crate) fn profile_name(key: &str) -> String {
    let readable: String = key
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let readable = readable.trim_start_matches('.');
    // FNV-1a: stable across builds, unlike the std hasher.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{readable}-{:08x}", hash as u32)
}

/// The browser program: `configured`, else the first of [`PROGRAMS`] on
/// `PATH`.
pub fn find_executable(configured: Option<&Path>) -> Result<PathBuf, ToolError> {
    if let Some(path) = configured {
        return crate::find_program(path).ok_or_else(|| {
            ToolError::failed(format!(
                "tools.browser.executable is {}, which is not an executable file; point it at \
                 Chromium or Chrome, or remove it to search PATH",
                path.display()
            ))
        });
    }
    if let Some(found) = PROGRAMS
        .iter()
        .find_map(|program| crate::find_program(Path::new(program)))
    {
        return Ok(found);
    }
    Err(ToolError::failed(format!(
        "no Chromium or Chrome found (looked for {} on PATH); install one (`apt install \
         chromium` on Debian and Ubuntu) or set tools.browser.executable",
        PROGRAMS.join(", ")
    )))
}

/// What `<program> --version` prints (`Chromium 148.0.7778.167 built on
/// Debian…`), for `flynn doctor`.
pub async fn browser_version(program: &Path) -> Result<String, String> {
    let output = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(program)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| format!("{} --version did not answer in 10 s", program.display()))?
    .map_err(|error| format!("cannot run {}: {error}", program.display()))?;
    let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() && !text.is_empty() {
        Ok(text)
    } else {
        Err(format!(
            "{} --version failed ({}): {}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_are_safe_and_distinct() {
        let a = profile_name("telegram:12345");
        let b = profile_name("telegram_12345");
        assert!(a.starts_with("telegram_12345-"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, profile_name("telegram:12345"));
        let odd = profile_name("../../etc/passwd");
        assert!(!odd.contains('/') && !odd.starts_with('.'), "{odd}");
    }

    #[test]
    fn a_configured_program_that_is_not_there_is_named() {
        let error = find_executable(Some(Path::new("/nonexistent/chromium"))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "tools.browser.executable is /nonexistent/chromium, which is not an executable \
             file; point it at Chromium or Chrome, or remove it to search PATH"
        );
    }
}
