//! A stand-in for the Hugging Face hub's file downloads, as the hub does
//! them for files stored with Git LFS:
//! - `HEAD|GET /{owner}/{repo}/resolve/main/{file}` answers `302 Found`
//!   with `Location` on another host (the content store, a second server
//!   here), the file's SHA-256 quoted in `X-Linked-Etag`, its size in
//!   `X-Linked-Size`, and the LFS pointer's git blob id as `ETag`;
//! - a renamed repository answers `307` with a relative `Location` to its
//!   new name;
//! - a missing file answers `404` with `X-Error-Code: EntryNotFound`;
//! - the content store serves `GET /{sha256}` whole (`200`) or from a
//!   byte offset (`Range: bytes=N-`, `206` with `Content-Range`), `416`
//!   past the end.
//!
//! Violations: a method other than HEAD or GET, a malformed `Range`, and
//! an `Authorization` header sent to the content store (a token must not
//! leave the hub). The store can be told to break off the next download
//! after some bytes, or to serve bytes that do not match the checksum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::server::{self, CapturedRequest, Received, Server};

#[derive(Debug, Default)]
struct State {
    /// `owner/repo/file` → the file's bytes.
    files: HashMap<String, Vec<u8>>,
    /// Old `owner/repo` → new.
    renamed: HashMap<String, String>,
    /// The next content download stops after this many bytes.
    cut_after: Option<usize>,
    /// Content downloads serve bytes with one changed.
    corrupt: bool,
    requests: Vec<(&'static str, CapturedRequest)>,
    violations: Vec<String>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The hub and its content store.
#[derive(Debug)]
pub struct FakeHub {
    shared: Arc<Shared>,
    hub: Server,
    store: Server,
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The git blob id of an LFS pointer, as the hub sends in `ETag`.
fn pointer_id(bytes: &[u8]) -> String {
    let pointer = format!(
        "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n",
        sha256(bytes),
        bytes.len()
    );
    hex::encode(&Sha256::digest(format!("blob {}\0{pointer}", pointer.len()))[..20])
}

fn captured(received: &Received) -> CapturedRequest {
    CapturedRequest {
        method: received.method.clone(),
        path: received.path.clone(),
        headers: received.headers.clone(),
        body: serde_json::Value::Null,
    }
}

impl FakeHub {
    pub fn start() -> FakeHub {
        let shared = Arc::new(Shared::default());
        let store = {
            let shared = Arc::clone(&shared);
            Server::start_router(
                "hub-store",
                Router::new().fallback(move |request: Request| {
                    let shared = Arc::clone(&shared);
                    async move { store(&shared, Received::read(request).await) }
                }),
            )
        };
        let store_url = format!("http://{}", store.addr());
        let hub = {
            let shared = Arc::clone(&shared);
            Server::start_router(
                "hub",
                Router::new().fallback(move |request: Request| {
                    let shared = Arc::clone(&shared);
                    let store_url = store_url.clone();
                    async move { hub(&shared, &store_url, Received::read(request).await) }
                }),
            )
        };
        FakeHub { shared, hub, store }
    }

    /// `http://127.0.0.1:<port>`: what `HF_ENDPOINT` is set to.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.hub.addr())
    }

    /// The content store's origin.
    pub fn store_url(&self) -> String {
        format!("http://{}", self.store.addr())
    }

    /// Puts a file in a repository (`owner/repo`).
    pub fn add(&self, repo: &str, file: &str, bytes: Vec<u8>) {
        self.shared
            .lock()
            .files
            .insert(format!("{repo}/{file}"), bytes);
    }

    /// Makes `old` (`owner/repo`) a renamed repository now called `new`.
    pub fn rename(&self, old: &str, new: &str) {
        self.shared
            .lock()
            .renamed
            .insert(old.to_owned(), new.to_owned());
    }

    /// The next content download sends `bytes` bytes and breaks off.
    pub fn cut_next_download_after(&self, bytes: usize) {
        self.shared.lock().cut_after = Some(bytes);
    }

    /// Content downloads serve bytes that do not match the checksum.
    pub fn corrupt_downloads(&self, corrupt: bool) {
        self.shared.lock().corrupt = corrupt;
    }

    /// Every request, with the server it reached (`hub` or `store`).
    pub fn requests(&self) -> Vec<(&'static str, CapturedRequest)> {
        self.shared.lock().requests.clone()
    }

    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }
}

fn hub(shared: &Shared, store_url: &str, received: Received) -> Response {
    let mut state = shared.lock();
    state.requests.push(("hub", captured(&received)));
    if received.method != "HEAD" && received.method != "GET" {
        state.violations.push(format!(
            "hub: {} {}: only HEAD and GET resolve files",
            received.method, received.path
        ));
        return server::respond(405, &[], Body::empty());
    }
    let path = received.path.trim_start_matches('/');
    let parts: Vec<&str> = path.splitn(5, '/').collect();
    let [owner, name, "resolve", "main", file] = parts.as_slice() else {
        return not_found();
    };
    let repo = format!("{owner}/{name}");
    if let Some(new) = state.renamed.get(&repo) {
        let location = format!("/{new}/resolve/main/{file}");
        return server::respond(307, &[("location", location.as_str())], Body::empty());
    }
    let Some(bytes) = state.files.get(&format!("{repo}/{file}")) else {
        return not_found();
    };
    let sha = sha256(bytes);
    let location = format!("{store_url}/{sha}");
    let size = bytes.len().to_string();
    let linked = format!("\"{sha}\"");
    let etag = format!("\"{}\"", pointer_id(bytes));
    server::respond(
        302,
        &[
            ("location", location.as_str()),
            ("x-linked-etag", linked.as_str()),
            ("x-linked-size", size.as_str()),
            ("etag", etag.as_str()),
            ("x-repo-commit", "0123456789abcdef0123456789abcdef01234567"),
        ],
        Body::empty(),
    )
}

fn not_found() -> Response {
    server::respond(
        404,
        &[
            ("x-error-code", "EntryNotFound"),
            ("x-error-message", "Entry not found"),
        ],
        Body::from("Entry not found"),
    )
}

fn store(shared: &Shared, received: Received) -> Response {
    let mut state = shared.lock();
    state.requests.push(("store", captured(&received)));
    if received.header("authorization").is_some() {
        state.violations.push(format!(
            "store: GET {}: an Authorization header reached the content store",
            received.path
        ));
    }
    if received.method != "GET" {
        state.violations.push(format!(
            "store: {} {}: only GET serves content",
            received.method, received.path
        ));
        return server::respond(405, &[], Body::empty());
    }
    let sha = received.path.trim_start_matches('/');
    let Some(bytes) = state
        .files
        .values()
        .find(|bytes| sha256(bytes) == sha)
        .cloned()
    else {
        return server::respond(404, &[], Body::empty());
    };
    let mut bytes = bytes;
    if state.corrupt
        && let Some(last) = bytes.last_mut()
    {
        *last ^= 0xff;
    }
    let total = bytes.len();
    let start = match received.header("range") {
        None => None,
        Some(range) => match parse_range(range) {
            Some(start) => Some(start),
            None => {
                state.violations.push(format!(
                    "store: GET {}: unreadable Range '{range}', expected 'bytes=N-'",
                    received.path
                ));
                return server::respond(400, &[], Body::empty());
            }
        },
    };
    if let Some(start) = start
        && start >= total
    {
        let range = format!("bytes */{total}");
        return server::respond(416, &[("content-range", range.as_str())], Body::empty());
    }
    let from = start.unwrap_or(0);
    let body = bytes[from..].to_vec();
    let length = body.len().to_string();
    let cut = state.cut_after.take();
    let body = match cut {
        Some(cut) if cut < body.len() => {
            let head = Bytes::from(body[..cut].to_vec());
            // The first bytes go out (and reach the client) before the
            // connection breaks.
            let broken = async {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                Err::<Bytes, _>(std::io::Error::other("connection cut by the test"))
            };
            Body::from_stream(
                futures::stream::iter(vec![Ok(head)]).chain(futures::stream::once(broken)),
            )
        }
        _ => Body::from(body),
    };
    match start {
        Some(start) => {
            let range = format!("bytes {start}-{}/{total}", total - 1);
            server::respond(
                206,
                &[
                    ("content-range", range.as_str()),
                    ("content-length", length.as_str()),
                    ("accept-ranges", "bytes"),
                ],
                body,
            )
        }
        None => server::respond(
            200,
            &[
                ("content-length", length.as_str()),
                ("accept-ranges", "bytes"),
            ],
            body,
        ),
    }
}

/// `bytes=N-` or `bytes=N-M` → N.
fn parse_range(range: &str) -> Option<usize> {
    let spec = range.trim().strip_prefix("bytes=")?;
    let (start, end) = spec.split_once('-')?;
    if !end.is_empty() && end.parse::<usize>().is_err() {
        return None;
    }
    start.parse().ok()
}
