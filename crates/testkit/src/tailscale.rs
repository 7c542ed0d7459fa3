//! A stand-in for tailscaled's LocalAPI on a Unix socket: `GET
//! /localapi/v0/whois?addr=<ip>` or `<ip:port>` answers who a tailnet
//! address is, in the real JSON shape (`Node`, `UserProfile`, `CapMap`,
//! PascalCase keys). Strict as tailscaled is: a `Host` other than
//! `local-tailscaled.sock` (or none), or any `Origin` or `Referer`, gets
//! `403 invalid localapi request`; an unknown address gets `404 no match
//! for IP:port`; a missing `addr` gets `400`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

/// One tailnet node as whois describes it.
#[derive(Debug, Clone)]
struct Peer {
    login: String,
    tagged: bool,
}

#[derive(Debug, Default)]
struct Shared {
    peers: Mutex<HashMap<IpAddr, Peer>>,
    asked: Mutex<Vec<String>>,
    violations: Mutex<Vec<String>>,
}

/// A fake tailscaled listening on a Unix socket in a directory of the
/// caller's.
#[derive(Debug)]
pub struct FakeTailscaled {
    socket: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeTailscaled {
    /// Listens on `<dir>/tailscaled.sock` (on the current runtime).
    pub async fn start(dir: &Path) -> std::io::Result<Self> {
        let socket = dir.join("tailscaled.sock");
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/localapi/v0/whois", get(whois))
            .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeTailscaled {
            socket,
            shared,
            task,
        })
    }

    /// The socket's path (`gateway.tailscale.socket`).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `ip` is a node of the user `login`.
    pub fn add_user(&self, ip: IpAddr, login: &str) {
        self.insert(ip, login, false);
    }

    /// `ip` is a tagged node (owned by the tailnet, not a person) that
    /// `login` set up.
    pub fn add_tagged(&self, ip: IpAddr, login: &str) {
        self.insert(ip, login, true);
    }

    fn insert(&self, ip: IpAddr, login: &str, tagged: bool) {
        self.shared
            .peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                ip,
                Peer {
                    login: login.to_owned(),
                    tagged,
                },
            );
    }

    /// The `addr` of every whois asked, in order.
    pub fn asked(&self) -> Vec<String> {
        self.shared
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests tailscaled would have refused.
    pub fn violations(&self) -> Vec<String> {
        self.shared
            .violations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for FakeTailscaled {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

async fn whois(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !(host.is_empty() || host == "local-tailscaled.sock")
        || headers.contains_key(header::ORIGIN)
        || headers.contains_key(header::REFERER)
    {
        shared
            .violations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("a request with Host '{host}', Origin or Referer"));
        return (StatusCode::FORBIDDEN, "invalid localapi request\n").into_response();
    }
    let Some(addr) = query.get("addr") else {
        return (StatusCode::BAD_REQUEST, "missing 'addr' parameter\n").into_response();
    };
    shared
        .asked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(addr.clone());
    let ip = addr.parse::<IpAddr>().ok().or_else(|| {
        addr.parse::<std::net::SocketAddr>()
            .ok()
            .map(|socket| socket.ip())
    });
    let Some(ip) = ip else {
        return (StatusCode::BAD_REQUEST, "invalid 'addr' parameter\n").into_response();
    };
    let peer = shared
        .peers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&ip)
        .cloned();
    let Some(peer) = peer else {
        return (StatusCode::NOT_FOUND, "no match for IP:port\n").into_response();
    };
    let mut node = json!({
        "ID": 7_000_001,
        "StableID": "nStable1CNTRL",
        "Name": "laptop.tailnet-1234.ts.net.",
        "User": 5_000_001,
        "Addresses": [format!("{ip}/32")],
        "AllowedIPs": [format!("{ip}/32")],
        "Online": true,
        "MachineAuthorized": true,
    });
    if peer.tagged {
        node["Tags"] = json!(["tag:server"]);
    }
    let body = json!({
        "Node": node,
        "UserProfile": {
            "ID": 5_000_001,
            "LoginName": if peer.tagged { "tagged-devices".to_owned() } else { peer.login.clone() },
            "DisplayName": peer.login,
            "ProfilePicURL": "",
        },
        "CapMap": {},
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}
