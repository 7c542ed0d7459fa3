//! Tailscale identity, confirmed: on the listener only `tailscale serve`
//! targets (`gateway.tailscale.listen`), a request's
//! `Tailscale-User-Login` counts only when tailscaled's LocalAPI, asked
//! over its Unix socket who the client address `tailscale serve` reports
//! (`X-Forwarded-For`) is, names the same login.
//!
//! Tailscale Serve removes identity headers a client sent and sets its own
//! (`Tailscale-User-Login`, `X-Forwarded-For`, `X-Forwarded-Host`); a
//! generic reverse proxy passes a client's headers on. So the headers are
//! never read on the main listener, and on the Tailscale listener they
//! are checked against tailscaled itself.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::auth::Client;
use crate::server::State as Gateway;

/// How long tailscaled has to answer.
const WHOIS_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer is reused.
const WHOIS_TTL: Duration = Duration::from_secs(30);
/// Largest answer read.
const MAX_ANSWER: u64 = 1024 * 1024;

/// Who tailscaled says an address is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WhoIs {
    pub login: String,
    /// Tagged nodes have no user identity.
    pub tagged: bool,
}

/// Asks tailscaled who a tailnet address is, keeping answers a little
/// while.
#[derive(Debug)]
pub(crate) struct LocalApi {
    socket: PathBuf,
    answers: Mutex<HashMap<IpAddr, (Instant, WhoIs)>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WhoIsResponse {
    #[serde(default)]
    node: Option<WireNode>,
    #[serde(default)]
    user_profile: Option<WireUser>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireNode {
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireUser {
    #[serde(default)]
    login_name: String,
}

impl LocalApi {
    pub(crate) fn new(socket: PathBuf) -> Self {
        LocalApi {
            socket,
            answers: Mutex::new(HashMap::new()),
        }
    }

    /// `GET /localapi/v0/whois?addr=<ip>` on tailscaled's socket.
    pub(crate) async fn whois(&self, ip: IpAddr) -> Result<WhoIs, String> {
        if let Some((at, answer)) = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&ip)
            && at.elapsed() < WHOIS_TTL
        {
            return Ok(answer.clone());
        }
        let answer = tokio::time::timeout(WHOIS_TIMEOUT, ask(&self.socket, ip))
            .await
            .map_err(|_| {
                format!(
                    "tailscaled at {} did not answer in time",
                    self.socket.display()
                )
            })??;
        let mut answers = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if answers.len() > 1024 {
            answers.retain(|_, (at, _)| at.elapsed() < WHOIS_TTL);
        }
        answers.insert(ip, (Instant::now(), answer.clone()));
        Ok(answer)
    }
}

async fn ask(socket: &Path, ip: IpAddr) -> Result<WhoIs, String> {
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot reach tailscaled at {}: {e}", socket.display()))?;
    // HTTP/1.0: the answer ends where the connection does.
    let request =
        format!("GET /localapi/v0/whois?addr={ip} HTTP/1.0\r\nHost: local-tailscaled.sock\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot ask tailscaled: {e}"))?;
    let mut raw = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .await
        .map_err(|e| format!("cannot read tailscaled's answer: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("tailscaled's answer is not HTTP")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("tailscaled's answer has no status")?;
    match status {
        200 => {}
        404 => return Err(format!("tailscaled does not know {ip}")),
        other => return Err(format!("tailscaled answered {other} to whois")),
    }
    let chunked = head.lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        dechunk(body).ok_or("tailscaled's chunked answer is malformed")?
    } else {
        body.to_vec()
    };
    let answer: WhoIsResponse = serde_json::from_slice(&body)
        .map_err(|e| format!("tailscaled's whois answer is not understood: {e}"))?;
    let login = answer
        .user_profile
        .map(|user| user.login_name)
        .filter(|login| !login.is_empty())
        .ok_or("tailscaled names no user for the address")?;
    Ok(WhoIs {
        login,
        tagged: answer.node.is_some_and(|node| !node.tags.is_empty()),
    })
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let end = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..end]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        body = &body[end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// The client a request on the Tailscale listener is, when its
/// `Tailscale-User-Login` is an allowed login and tailscaled confirms the
/// client address is that user's.
pub(crate) async fn verify(
    gateway: &Gateway,
    login: &str,
    headers: &HeaderMap,
) -> Result<Client, String> {
    let settings = &gateway.settings.tailscale;
    if headers.contains_key("tailscale-funnel-request") {
        return Err("a Funnel request from the internet carries no tailnet identity".to_owned());
    }
    if !settings
        .users
        .iter()
        .any(|user| user.eq_ignore_ascii_case(login))
    {
        return Err(format!("'{login}' is not in gateway.tailscale.users"));
    }
    let ip: IpAddr = headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .ok_or("no client address from `tailscale serve` (X-Forwarded-For)")?;
    let Some(localapi) = &gateway.localapi else {
        return Err("no Tailscale listener is configured".to_owned());
    };
    let whois = localapi.whois(ip).await?;
    if whois.tagged {
        return Err(format!("{ip} is a tagged node, not a person"));
    }
    if !whois.login.eq_ignore_ascii_case(login) {
        return Err(format!(
            "tailscaled says {ip} is '{}', not '{login}'",
            whois.login
        ));
    }
    Ok(Client::tailscale(
        &whois.login,
        settings.scopes.clone(),
        SocketAddr::new(ip, 0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_answers_are_joined() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").as_deref(),
            Some(&b"abcde"[..])
        );
        assert_eq!(dechunk(b"5\r\nab"), None);
    }
}
