//! A small client of the Chrome DevTools Protocol, over the pipe Chromium
//! opens with `--remote-debugging-pipe`: it reads commands from its fd 3
//! and writes answers and events to its fd 4, each message one JSON
//! object ended by a NUL byte.
//!
//! A command `{id, method, params, sessionId?}` is answered by the message
//! with the same `id`, holding a `result` or an `error {code, message}`;
//! a message with a `method` and no `id` is an event, handed to whoever
//! [subscribed](Connection::subscribe) to that method on that session.
//! A page is reached through a flattened session (`Target.attachToTarget`
//! with `flatten: true`): the same connection, with the page's
//! `sessionId` on every message.
//!
//! A pipe rather than a WebSocket on `--remote-debugging-port`: Chromium
//! exits when the pipe closes, so it ends with Flynn however Flynn ends
//! (`SIGKILL` included: the kernel closes the pipe), and it listens on no
//! port that a page or another local user could reach.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::marker::PhantomData;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// The largest message taken from the browser (a full-page screenshot,
/// base64-encoded, is the largest there is).
const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// Events a subscription holds unread before newer ones are dropped.
const EVENT_BUFFER: usize = 256;

/// Commands waiting to be written.
const QUEUE: usize = 64;

/// Lines of the browser's stderr kept for an error message.
const STDERR_LINES: usize = 5;

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CdpError {
    /// The browser answered with an error.
    #[error("the browser refused {method}: {message} (code {code})")]
    Refused {
        method: &'static str,
        code: i64,
        message: String,
    },
    #[error("the browser did not answer {method} within {after:?}")]
    Timeout {
        method: &'static str,
        after: Duration,
    },
    /// The pipe closed (the browser exited) or could not be written.
    #[error("the connection to the browser closed before {method} was answered: {reason}")]
    Closed {
        method: &'static str,
        reason: String,
    },
    #[error("the browser's answer to {method} was not understood: {detail}")]
    Unexpected {
        method: &'static str,
        detail: String,
    },
}

/// The connection to one browser: commands to the browser itself, events
/// it sends, and [`Page`]s. Dropping it closes the pipe, which ends the
/// browser.
#[derive(Debug)]
pub(crate) struct Connection {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

/// One page (a flattened target session) of a [`Connection`].
#[derive(Debug, Clone)]
pub(crate) struct Page {
    shared: Arc<Shared>,
    session: String,
}

/// The events of one method, as `T`, in the order they came.
#[derive(Debug)]
pub(crate) struct Events<T> {
    method: &'static str,
    events: mpsc::Receiver<Value>,
    kind: PhantomData<fn() -> T>,
}

#[derive(Debug)]
struct Shared {
    outgoing: mpsc::Sender<Vec<u8>>,
    state: Mutex<State>,
    next_id: AtomicU64,
    timeout: Duration,
}

#[derive(Debug, Default)]
struct State {
    pending: HashMap<u64, oneshot::Sender<Answer>>,
    subscribers: Vec<Subscriber>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
}

#[derive(Debug)]
struct Subscriber {
    method: &'static str,
    session: Option<String>,
    events: mpsc::Sender<Value>,
}

#[derive(Debug)]
enum Answer {
    Result(Value),
    Error { code: i64, message: String },
    Closed(String),
}

/// A message from the browser: an answer (`id`) or an event (`method`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Incoming {
    id: Option<u64>,
    result: Option<Value>,
    error: Option<Failure>,
    method: Option<String>,
    params: Option<Value>,
    session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Failure {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl Connection {
    /// A connection reading the browser's messages from `reader` and
    /// writing commands to `writer`; each command waits at most
    /// `timeout` for its answer.
    pub(crate) fn new<R, W>(reader: R, writer: W, timeout: Duration) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (outgoing, queue) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            outgoing,
            state: Mutex::default(),
            next_id: AtomicU64::new(1),
            timeout,
        });
        let writer = tokio::spawn(write_loop(writer, queue, Arc::clone(&shared)));
        let reader = tokio::spawn(read_loop(BufReader::new(reader), Arc::clone(&shared)));
        Connection {
            shared,
            reader,
            writer,
        }
    }

    /// Sends `method` to the browser itself; its result as `T`.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<T, CdpError> {
        self.shared
            .call(None, method, params, self.shared.timeout)
            .await
    }

    /// Like [`call`](Self::call), waiting up to `timeout` instead (the
    /// first command, answered once the browser has started).
    pub(crate) async fn call_within<T: DeserializeOwned>(
        &self,
        timeout: Duration,
        method: &'static str,
        params: Value,
    ) -> Result<T, CdpError> {
        self.shared.call(None, method, params, timeout).await
    }

    /// The browser's own `method` events from now on.
    pub(crate) fn subscribe<T: DeserializeOwned>(&self, method: &'static str) -> Events<T> {
        self.shared.subscribe(method, None)
    }

    /// The page of the flattened session `session`.
    pub(crate) fn page(&self, session: String) -> Page {
        Page {
            shared: Arc::clone(&self.shared),
            session,
        }
    }

    /// Whether the browser is still connected.
    pub(crate) fn is_open(&self) -> bool {
        lock(&self.shared.state).closed.is_none()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
        self.shared.close("the connection was closed".to_owned());
    }
}

impl Page {
    /// Sends `method` to the page; its result as `T`.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<T, CdpError> {
        self.shared
            .call(Some(&self.session), method, params, self.shared.timeout)
            .await
    }

    /// The page's `method` events from now on.
    pub(crate) fn subscribe<T: DeserializeOwned>(&self, method: &'static str) -> Events<T> {
        self.shared.subscribe(method, Some(self.session.clone()))
    }
}

impl<T: DeserializeOwned> Events<T> {
    /// The next event; `None` once the connection has closed. An event
    /// that does not parse as `T` is skipped.
    pub(crate) async fn next(&mut self) -> Option<T> {
        loop {
            let params = self.events.recv().await?;
            match serde_json::from_value(params) {
                Ok(event) => return Some(event),
                Err(error) => {
                    tracing::debug!(method = self.method, %error, "browser: an event not understood");
                }
            }
        }
    }
}

impl Shared {
    async fn call<T: DeserializeOwned>(
        &self,
        session: Option<&str>,
        method: &'static str,
        params: Value,
        timeout: Duration,
    ) -> Result<T, CdpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        {
            let mut state = lock(&self.state);
            if let Some(reason) = &state.closed {
                return Err(CdpError::Closed {
                    method,
                    reason: reason.clone(),
                });
            }
            state.pending.insert(id, answer);
        }
        // Forgets the call however this future ends (a caller's timeout
        // drops it).
        let _pending = Pending { shared: self, id };
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::String(session.to_owned());
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        let waited = tokio::time::timeout(timeout, async {
            self.outgoing.send(bytes).await.ok()?;
            answered.await.ok()
        })
        .await;
        let closed = |reason: String| CdpError::Closed { method, reason };
        match waited {
            Err(_) => Err(CdpError::Timeout {
                method,
                after: timeout,
            }),
            Ok(None) => Err(closed(self.closed_reason())),
            Ok(Some(Answer::Closed(reason))) => Err(closed(reason)),
            Ok(Some(Answer::Error { code, message })) => Err(CdpError::Refused {
                method,
                code,
                message,
            }),
            Ok(Some(Answer::Result(result))) => {
                serde_json::from_value(result).map_err(|error| CdpError::Unexpected {
                    method,
                    detail: error.to_string(),
                })
            }
        }
    }

    fn subscribe<T>(&self, method: &'static str, session: Option<String>) -> Events<T> {
        let (sender, events) = mpsc::channel(EVENT_BUFFER);
        let mut state = lock(&self.state);
        state.subscribers.retain(|s| !s.events.is_closed());
        // Once closed, the sender is dropped here and `next` says so.
        if state.closed.is_none() {
            state.subscribers.push(Subscriber {
                method,
                session,
                events: sender,
            });
        }
        Events {
            method,
            events,
            kind: PhantomData,
        }
    }

    /// Hands one message from the browser to its caller or subscribers.
    fn dispatch(&self, bytes: &[u8]) {
        let incoming: Incoming = match serde_json::from_slice(bytes) {
            Ok(incoming) => incoming,
            Err(error) => {
                tracing::debug!(%error, "browser: a message that is not CDP's JSON");
                return;
            }
        };
        if let Some(id) = incoming.id {
            let answer = match incoming.error {
                Some(failure) => Answer::Error {
                    code: failure.code,
                    message: match failure.data {
                        Some(Value::String(data)) if !data.is_empty() => {
                            format!("{}: {data}", failure.message)
                        }
                        _ => failure.message,
                    },
                },
                None => Answer::Result(
                    incoming
                        .result
                        .unwrap_or_else(|| Value::Object(Default::default())),
                ),
            };
            let caller = lock(&self.state).pending.remove(&id);
            if let Some(caller) = caller {
                let _ = caller.send(answer);
            }
            return;
        }
        let Some(method) = incoming.method else {
            tracing::debug!("browser: a message that is neither an answer nor an event");
            return;
        };
        let params = incoming
            .params
            .unwrap_or_else(|| Value::Object(Default::default()));
        let mut state = lock(&self.state);
        state.subscribers.retain(|s| !s.events.is_closed());
        for subscriber in state.subscribers.iter().filter(|s| {
            s.method == method && s.session.as_deref() == incoming.session_id.as_deref()
        }) {
            if subscriber.events.try_send(params.clone()).is_err() {
                tracing::debug!(%method, "browser: an unread subscription dropped an event");
            }
        }
    }

    /// Ends the connection: calls waiting and to come fail with `reason`,
    /// subscriptions end.
    fn close(&self, reason: String) {
        let mut state = lock(&self.state);
        if state.closed.is_some() {
            return;
        }
        for (_, caller) in state.pending.drain() {
            let _ = caller.send(Answer::Closed(reason.clone()));
        }
        state.subscribers.clear();
        state.closed = Some(reason);
    }

    fn closed_reason(&self) -> String {
        lock(&self.state)
            .closed
            .clone()
            .unwrap_or_else(|| "the connection was closed".to_owned())
    }
}

/// A call in flight, forgotten when dropped.
struct Pending<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        lock(&self.shared.state).pending.remove(&self.id);
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut queue: mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    while let Some(message) = queue.recv().await {
        let written = async {
            writer.write_all(&message).await?;
            writer.flush().await
        }
        .await;
        if let Err(error) = written {
            shared.close(format!("writing to the browser failed: {error}"));
            return;
        }
    }
}

async fn read_loop<R: AsyncBufRead + Unpin>(mut reader: R, shared: Arc<Shared>) {
    let mut message = Vec::new();
    let reason = loop {
        match next_message(&mut reader, &mut message).await {
            Ok(true) => shared.dispatch(&message),
            Ok(false) => break "the browser exited or crashed".to_owned(),
            Err(reason) => break reason,
        }
        message.clear();
    };
    shared.close(reason);
}

/// Reads one NUL-ended message into `message`; false at the end of the
/// stream (a message cut short there is dropped).
async fn next_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    message: &mut Vec<u8>,
) -> Result<bool, String> {
    loop {
        let chunk = reader
            .fill_buf()
            .await
            .map_err(|error| format!("reading from the browser failed: {error}"))?;
        if chunk.is_empty() {
            return Ok(false);
        }
        if let Some(end) = chunk.iter().position(|&byte| byte == 0) {
            message.extend_from_slice(&chunk[..end]);
            reader.consume(end + 1);
            return Ok(true);
        }
        let taken = chunk.len();
        message.extend_from_slice(chunk);
        reader.consume(taken);
        if message.len() > MAX_MESSAGE {
            return Err(format!(
                "the browser sent a message over {} MiB",
                MAX_MESSAGE >> 20
            ));
        }
    }
}

/// A browser started by [`launch`].
#[derive(Debug)]
pub(crate) struct Launched {
    pub(crate) child: Child,
    pub(crate) connection: Connection,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_task: JoinHandle<()>,
}

impl Launched {
    /// The last lines the browser wrote to stderr, once it has exited
    /// (waiting a moment for them to be read).
    pub(crate) async fn last_words(&mut self) -> Vec<String> {
        let _ = tokio::time::timeout(Duration::from_millis(500), &mut self.stderr_task).await;
        lock(&self.stderr).iter().cloned().collect()
    }
}

/// Starts `program` with `args` and `--remote-debugging-pipe`, killed if
/// the returned child is dropped; commands wait up to `timeout`.
///
/// Chromium wants the pipe on its fds 3 and 4, which std's `Command`
/// cannot set without `unsafe`; `/bin/sh` moves the child's stdin and
/// stdout there and `exec`s the browser (the same process, so the
/// child's pid is the browser's).
pub(crate) fn launch(
    program: &Path,
    args: Vec<OsString>,
    timeout: Duration,
) -> std::io::Result<Launched> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"exec "$@" --remote-debugging-pipe 3<&0 4>&1 </dev/null 1>&2"#)
        .arg("sh")
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(commands), Some(answers), Some(errors)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("the browser's pipes were not set up"));
    };
    let stderr = Arc::new(Mutex::new(VecDeque::new()));
    let stderr_task = tokio::spawn(keep_stderr(errors, Arc::clone(&stderr)));
    Ok(Launched {
        child,
        connection: Connection::new(answers, commands, timeout),
        stderr,
        stderr_task,
    })
}

/// Logs the browser's stderr and keeps its last lines.
async fn keep_stderr(errors: impl AsyncRead + Unpin, kept: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BufReader::new(errors).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(target: "flynn_tools::browser::stderr", "{line}");
        let mut kept = lock(&kept);
        if kept.len() == STDERR_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use serde::de::IgnoredAny;
    use tokio::io::{AsyncReadExt, DuplexStream};

    use super::*;

    /// A connection and the browser's end of its pipe.
    fn connected(timeout: Duration) -> (Connection, DuplexStream) {
        let (ours, browser) = tokio::io::duplex(1 << 16);
        let (reader, writer) = tokio::io::split(ours);
        (Connection::new(reader, writer, timeout), browser)
    }

    /// The next command the browser end receives.
    async fn received(browser: &mut DuplexStream) -> Value {
        let mut bytes = Vec::new();
        loop {
            let byte = browser.read_u8().await.unwrap();
            if byte == 0 {
                return serde_json::from_slice(&bytes).unwrap();
            }
            bytes.push(byte);
        }
    }

    async fn send(browser: &mut DuplexStream, message: Value) {
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        browser.write_all(&bytes).await.unwrap();
    }

    #[tokio::test]
    async fn answers_are_matched_to_their_commands_by_id() {
        let (connection, mut browser) = connected(Duration::from_secs(5));
        let page = connection.page("S1".to_owned());
        let first = connection.call::<Value>("Browser.getVersion", json!({}));
        let second = page.call::<Value>("Page.getFrameTree", json!({"x": 1}));
        let browser_side = async {
            let a = received(&mut browser).await;
            let b = received(&mut browser).await;
            assert_eq!(
                (a.clone(), b.clone()),
                (
                    json!({"id": 1, "method": "Browser.getVersion", "params": {}}),
                    json!({"id": 2, "method": "Page.getFrameTree", "params": {"x": 1},
                           "sessionId": "S1"})
                )
            );
            // Out of order, split across writes, with an event between.
            send(
                &mut browser,
                json!({"id": 2, "result": {"two": 2}, "sessionId": "S1"}),
            )
            .await;
            browser
                .write_all(b"{\"method\":\"Page.x\",\"par")
                .await
                .unwrap();
            browser.write_all(b"ams\":{}}\0{\"id\":1,").await.unwrap();
            browser
                .write_all(b"\"result\":{\"one\":1}}\0")
                .await
                .unwrap();
        };
        let (first, second, ()) = tokio::join!(first, second, browser_side);
        assert_eq!(
            (first.unwrap(), second.unwrap()),
            (json!({"one": 1}), json!({"two": 2}))
        );
    }

    #[tokio::test]
    async fn an_error_answer_names_the_command_and_the_browsers_message() {
        let (connection, mut browser) = connected(Duration::from_secs(5));
        let call = connection.call::<IgnoredAny>("DOM.resolveNode", json!({"backendNodeId": 9}));
        let browser_side = async {
            let id = received(&mut browser).await["id"].clone();
            send(
                &mut browser,
                json!({"id": id, "error": {"code": -32000, "message": "No node with given id found"}}),
            )
            .await;
        };
        let (answer, ()) = tokio::join!(call, browser_side);
        let error = answer.unwrap_err();
        assert_eq!(
            error,
            CdpError::Refused {
                method: "DOM.resolveNode",
                code: -32000,
                message: "No node with given id found".to_owned()
            }
        );
        assert_eq!(
            error.to_string(),
            "the browser refused DOM.resolveNode: No node with given id found (code -32000)"
        );
    }

    #[tokio::test]
    async fn events_reach_the_subscribers_of_their_method_and_session() {
        let (connection, mut browser) = connected(Duration::from_secs(5));
        let page = connection.page("S1".to_owned());
        #[derive(Debug, Deserialize, PartialEq)]
        #[serde(rename_all = "camelCase")]
        struct Frame {
            frame_id: String,
        }
        let mut on_page = page.subscribe::<Frame>("Page.frameStartedLoading");
        let mut on_browser = connection.subscribe::<Value>("Browser.downloadWillBegin");
        for message in [
            // Another session's, a malformed one, then the page's own.
            json!({"method": "Page.frameStartedLoading", "params": {"frameId": "other"},
                   "sessionId": "S2"}),
            json!({"method": "Page.frameStartedLoading", "params": {"frameId": 7},
                   "sessionId": "S1"}),
            json!({"method": "Page.frameStartedLoading", "params": {"frameId": "F1"},
                   "sessionId": "S1"}),
            json!({"method": "Browser.downloadWillBegin", "params": {"guid": "g"}}),
        ] {
            send(&mut browser, message).await;
        }
        assert_eq!(
            on_page.next().await,
            Some(Frame {
                frame_id: "F1".to_owned()
            })
        );
        assert_eq!(on_browser.next().await, Some(json!({"guid": "g"})));
        drop(browser);
        assert_eq!(on_page.next().await, None);
    }

    #[tokio::test]
    async fn a_closed_pipe_fails_the_calls_waiting_and_those_to_come() {
        let (connection, mut browser) = connected(Duration::from_secs(30));
        let call = connection.call::<IgnoredAny>("Page.navigate", json!({}));
        let browser_side = async {
            received(&mut browser).await;
            // Odd input first: not JSON, JSON that is neither answer nor
            // event, an answer nobody waits for.
            browser
                .write_all(b"\xff\xfe not json\0[1,2]\0{}\0")
                .await
                .unwrap();
            send(&mut browser, json!({"id": 999, "result": {}})).await;
            drop(browser);
        };
        let (answer, ()) = tokio::join!(call, browser_side);
        let closed = CdpError::Closed {
            method: "Page.navigate",
            reason: "the browser exited or crashed".to_owned(),
        };
        assert_eq!(answer.unwrap_err(), closed);
        assert!(!connection.is_open());
        assert_eq!(
            connection
                .call::<IgnoredAny>("Page.navigate", json!({}))
                .await
                .unwrap_err(),
            closed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_without_an_answer_times_out_and_is_forgotten() {
        let (connection, mut browser) = connected(Duration::from_secs(3));
        let call = connection.call::<IgnoredAny>("Runtime.evaluate", json!({}));
        let browser_side = async { received(&mut browser).await };
        let (answer, sent) = tokio::join!(call, browser_side);
        assert_eq!(
            answer.unwrap_err(),
            CdpError::Timeout {
                method: "Runtime.evaluate",
                after: Duration::from_secs(3)
            }
        );
        assert!(lock(&connection.shared.state).pending.is_empty());
        // A late answer is ignored; the connection still works.
        send(&mut browser, json!({"id": sent["id"], "result": {}})).await;
        let next = connection.call::<Value>("Runtime.evaluate", json!({}));
        let browser_side = async {
            let id = received(&mut browser).await["id"].clone();
            send(&mut browser, json!({"id": id, "result": {"ok": true}})).await;
        };
        let (answer, ()) = tokio::join!(next, browser_side);
        assert_eq!(answer.unwrap(), json!({"ok": true}));
    }

    #[tokio::test]
    async fn an_answer_of_the_wrong_shape_is_an_error_not_a_panic() {
        let (connection, mut browser) = connected(Duration::from_secs(5));
        let call = connection.call::<String>("Page.navigate", json!({}));
        let browser_side = async {
            let id = received(&mut browser).await["id"].clone();
            send(&mut browser, json!({"id": id, "result": {"frameId": 3}})).await;
        };
        let (answer, ()) = tokio::join!(call, browser_side);
        assert_eq!(
            answer.unwrap_err().to_string(),
            "the browser's answer to Page.navigate was not understood: invalid type: map, \
             expected a string"
        );
    }
}
