//! The browser's only way out: a small HTTP proxy on loopback that
//! Chromium is told to send every request through (`--proxy-server`,
//! with `<-loopback>` so not even loopback bypasses it).
//!
//! For each request (`CONNECT host:port` for HTTPS and WebSockets, an
//! absolute-form `GET http://…` for plain HTTP) the proxy resolves the
//! name itself, once, checks every address with the SSRF guard
//! (`tools.browser.allow_private`), and connects to an address it
//! checked: the check is on the address actually connected to, so a
//! name that resolves differently the second time (DNS rebinding) gains
//! nothing, and navigations, redirects (each hop is a new request),
//! subresources, workers and WebSockets all pass the same gate. A
//! refused request is answered `403` with the reason, and recorded so
//! the tool call that caused it can say which host was refused and which
//! setting allows it.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Url;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::builtin::web::guard::Guard;

/// The setting a refusal names.
pub(crate) const SETTING: &str = "tools.browser.allow_private";

/// The longest request head read from the browser.
const MAX_HEAD: usize = 64 * 1024;

/// Refusals kept for the tools to report; older ones are dropped.
const KEPT: usize = 64;

/// A request the proxy refused, in the order they happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Counts every refusal of this proxy, from 1.
    pub(crate) seq: u64,
    /// The host as the request named it (a name or an address).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Why, and what setting would allow it.
    pub(crate) message: String,
}

#[derive(Debug, Default)]
struct Log {
    next: u64,
    refusals: VecDeque<Refusal>,
}

/// What the connections share: the guard, the proxy's own port (never
/// reachable), and the log of refusals.
#[derive(Debug)]
struct Shared {
    guard: Arc<Guard>,
    /// A page that reached the proxy itself could have it connect on its
    /// behalf, so it is refused even when `allow_private` allows
    /// loopback. (The browser has no DevTools port: it is driven over a
    /// pipe.)
    own_port: u16,
    log: Mutex<Log>,
    connect_timeout: Duration,
}

/// A running proxy; it stops, with every connection it relays, when
/// dropped.
#[derive(Debug)]
pub(crate) struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Listens on a free loopback port.
    pub(crate) async fn start(
        guard: Arc<Guard>,
        connect_timeout: Duration,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((IpAddr::from([127, 0, 0, 1]), 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            guard,
            own_port: addr.port(),
            log: Mutex::new(Log::default()),
            connect_timeout,
        });
        let task = tokio::spawn(serve(listener, Arc::clone(&shared)));
        Ok(Proxy { addr, shared, task })
    }

    /// What Chromium's `--proxy-server` takes.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The sequence number of the last refusal so far (0 before any): a
    /// call notes it, then asks for [`refusals_since`](Self::refusals_since).
    pub(crate) fn mark(&self) -> u64 {
        lock(&self.shared.log).next
    }

    /// Refusals after `mark`, oldest first.
    pub(crate) fn refusals_since(&self, mark: u64) -> Vec<Refusal> {
        lock(&self.shared.log)
            .refusals
            .iter()
            .filter(|r| r.seq > mark)
            .cloned()
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    // Dropped (and so aborted) with the accept loop.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(relay(stream, Arc::clone(&shared)));
                }
                Err(error) => {
                    tracing::debug!(%error, "browser proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// What the browser asked for.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    /// `CONNECT` tunnels; the rest are forwarded.
    tunnel: bool,
    host: String,
    port: u16,
    /// The head to send upstream (forwarded requests only).
    upstream_head: Vec<u8>,
}

async fn relay(mut client: TcpStream, shared: Arc<Shared>) {
    let mut buffer = Vec::with_capacity(4096);
    let head_len = match read_head(&mut client, &mut buffer).await {
        Ok(Some(len)) => len,
        Ok(None) => return,
        Err(error) => {
            tracing::debug!(%error, "browser proxy: reading a request failed");
            return;
        }
    };
    let request = match parse_request(&buffer[..head_len]) {
        Ok(request) => request,
        Err(reason) => {
            let _ = respond(&mut client, "400 Bad Request", &reason).await;
            return;
        }
    };
    let rest = buffer[head_len..].to_vec();
    let upstream = match connect(&shared, &request.host, request.port).await {
        Ok(stream) => stream,
        Err(Failure::Refused(message)) => {
            {
                let mut log = lock(&shared.log);
                log.next += 1;
                let seq = log.next;
                log.refusals.push_back(Refusal {
                    seq,
                    host: request.host.clone(),
                    port: request.port,
                    message: message.clone(),
                });
                while log.refusals.len() > KEPT {
                    log.refusals.pop_front();
                }
            }
            let _ = respond(&mut client, "403 Forbidden", &message).await;
            return;
        }
        Err(Failure::Unreachable(message)) => {
            let _ = respond(&mut client, "502 Bad Gateway", &message).await;
            return;
        }
    };
    let mut upstream = upstream;
    if request.tunnel {
        if client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
            || (!rest.is_empty() && upstream.write_all(&rest).await.is_err())
        {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        return;
    }
    if upstream.write_all(&request.upstream_head).await.is_err()
        || (!rest.is_empty() && upstream.write_all(&rest).await.is_err())
    {
        return;
    }
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    // The request body (if any) goes up while the answer comes down; the
    // exchange ends when the server closes (it was asked to).
    let up = async {
        let _ = tokio::io::copy(&mut client_read, &mut upstream_write).await;
        let _ = upstream_write.shutdown().await;
        // Keep this side alive until the answer is through.
        std::future::pending::<()>().await;
    };
    let down = forward_response(&mut upstream_read, &mut client_write);
    tokio::select! {
        () = up => {}
        _ = down => {}
    }
    let _ = client_write.shutdown().await;
}

/// Reads until the end of a request head; `Ok(Some(len))` is the head's
/// length in `buffer` (which may hold more), `Ok(None)` a connection
/// closed before a whole head.
async fn read_head(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(at) = find_head_end(buffer) {
            return Ok(Some(at));
        }
        if buffer.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too long"));
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn find_head_end(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Headers that concern only one hop, not the server.
const HOP_BY_HOP: [&str; 4] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
];

fn parse_request(head: &[u8]) -> Result<Request, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete request head".to_owned()),
        Err(error) => return Err(format!("malformed request: {error}")),
    }
    let method = parsed.method.unwrap_or_default();
    let target = parsed.path.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target)
            .ok_or_else(|| format!("CONNECT needs host:port, not '{target}'"))?;
        return Ok(Request {
            tunnel: true,
            host,
            port,
            upstream_head: Vec::new(),
        });
    }
    let url = Url::parse(target)
        .map_err(|_| format!("a proxy request needs an absolute URL, not '{target}'"))?;
    if !matches!(url.scheme(), "http" | "ws") {
        return Err(format!(
            "only http URLs go through this proxy, not '{target}'"
        ));
    }
    let host = url
        .host_str()
        .ok_or_else(|| format!("'{target}' names no host"))?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let upgrade = parsed
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("upgrade"));
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for header in parsed.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) && !(upgrade && name == "connection") {
            continue;
        }
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    if !upgrade {
        // One request per upstream connection: the next request may be
        // for another host, which must pass the guard itself.
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Request {
        tunnel: false,
        host,
        port,
        upstream_head: out,
    })
}

/// `host:port` or `[v6]:port`.
fn split_authority(authority: &str) -> Option<(String, u16)> {
    let (host, port) = authority.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_matches(['[', ']']);
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Copies the server's answer to the browser with its head rewritten to
/// `Connection: close`, so the browser never sends a second request down
/// a connection this proxy already pointed at one server.
async fn forward_response(
    upstream: &mut (impl AsyncRead + Unpin),
    client: &mut (impl AsyncWrite + Unpin),
) -> std::io::Result<()> {
    let mut buffer = Vec::with_capacity(4096);
    let Some(head_len) = read_head(upstream, &mut buffer).await? else {
        client.write_all(&buffer).await?;
        return Ok(());
    };
    let head = String::from_utf8_lossy(&buffer[..head_len]).into_owned();
    let switching = head
        .split_whitespace()
        .nth(1)
        .is_some_and(|status| status == "101");
    if switching {
        client.write_all(&buffer).await?;
    } else {
        let mut rewritten = String::with_capacity(head.len() + 20);
        for (i, line) in head.trim_end_matches("\r\n").split("\r\n").enumerate() {
            let name = line
                .split_once(':')
                .map(|(name, _)| name.trim().to_ascii_lowercase());
            if i > 0 && name.is_some_and(|name| HOP_BY_HOP.contains(&name.as_str())) {
                continue;
            }
            rewritten.push_str(line);
            rewritten.push_str("\r\n");
        }
        rewritten.push_str("Connection: close\r\n\r\n");
        client.write_all(rewritten.as_bytes()).await?;
        client.write_all(&buffer[head_len..]).await?;
    }
    tokio::io::copy(upstream, client).await?;
    Ok(())
}

enum Failure {
    /// The guard said no.
    Refused(String),
    /// Nothing answered, or the name does not resolve.
    Unreachable(String),
}

/// Resolves `host` once, and connects to the first address the guard
/// allows.
async fn connect(shared: &Shared, host: &str, port: u16) -> Result<TcpStream, Failure> {
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::time::timeout(
            shared.connect_timeout,
            tokio::net::lookup_host((host, port)),
        )
        .await
        .map_err(|_| Failure::Unreachable(format!("resolving {host} timed out")))?
        .map_err(|error| Failure::Unreachable(format!("cannot resolve {host}: {error}")))?
        .collect(),
    };
    let mut refusal = None;
    let mut allowed = Vec::new();
    for addr in addrs {
        if addr.ip().is_loopback() && addr.port() == shared.own_port {
            refusal.get_or_insert_with(|| {
                format!(
                    "refused {host}:{port}: it is the browser's own proxy, which pages may never reach"
                )
            });
            continue;
        }
        match shared.guard.check_ip(host, addr.ip()) {
            Ok(()) => allowed.push(addr),
            Err(refused) => {
                refusal.get_or_insert_with(|| refused.explain(SETTING));
            }
        }
    }
    if allowed.is_empty() {
        return Err(match refusal {
            Some(message) => Failure::Refused(message),
            None => Failure::Unreachable(format!("{host} has no address")),
        });
    }
    let mut last_error = None;
    for addr in allowed {
        match tokio::time::timeout(shared.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => last_error = Some(error.to_string()),
            Err(_) => last_error = Some("timed out".to_owned()),
        }
    }
    Err(Failure::Unreachable(format!(
        "cannot connect to {host}:{port}: {}",
        last_error.unwrap_or_default()
    )))
}

async fn respond(
    client: &mut (impl AsyncWrite + Unpin),
    status: &str,
    message: &str,
) -> std::io::Result<()> {
    let body = format!("{message}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_requests_go_upstream_in_origin_form_on_their_own_connection() {
        let head = b"GET http://example.com:8080/a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let request = parse_request(head).unwrap();
        assert_eq!(
            request,
            Request {
                tunnel: false,
                host: "example.com".to_owned(),
                port: 8080,
                upstream_head: b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n".to_vec(),
            }
        );
    }

    #[test]
    fn tunnels_name_host_and_port() {
        let request =
            parse_request(b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n").unwrap();
        assert_eq!(
            (request.tunnel, request.host.as_str(), request.port),
            (true, "::1", 443)
        );
        assert!(parse_request(b"CONNECT example.com HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"GET file:///etc/passwd HTTP/1.1\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn an_allowed_tunnel_carries_bytes_both_ways() {
        let proxy = Proxy::start(
            Arc::new(Guard::new(&["127.0.0.1".to_owned()])),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = server.accept().await.unwrap();
            let mut hello = [0u8; 5];
            stream.read_exact(&mut hello).await.unwrap();
            stream
                .write_all(&hello.map(|b| b.to_ascii_uppercase()))
                .await
                .unwrap();
        });
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream
            .write_all(
                format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\nhello").as_bytes(),
            )
            .await
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        assert_eq!(
            String::from_utf8(answer).unwrap(),
            "HTTP/1.1 200 Connection Established\r\n\r\nHELLO"
        );
        assert_eq!(proxy.mark(), 0);
    }

    #[tokio::test]
    async fn refuses_private_addresses_and_its_own_port_and_logs_them() {
        let proxy = Proxy::start(
            Arc::new(Guard::new(&["127.0.0.1".to_owned()])),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let upstream = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let blocked = upstream.local_addr().unwrap();
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream
            .write_all(
                format!("GET http://{blocked}/x HTTP/1.1\r\nHost: {blocked}\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(
            answer.ends_with(
                "refused 127.0.0.2: 127.0.0.2 is a loopback address, and private networks are off limits. If this host is trusted, add '127.0.0.2' to tools.browser.allow_private\n"
            ),
            "{answer}"
        );
        // The proxy's own port, though loopback is allowed.
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream
            .write_all(
                format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", proxy.addr.port()).as_bytes(),
            )
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        let refusals = proxy.refusals_since(0);
        assert_eq!(
            refusals
                .iter()
                .map(|r| (r.seq, r.host.as_str(), r.port))
                .collect::<Vec<_>>(),
            [
                (1, "127.0.0.2", blocked.port()),
                (2, "127.0.0.1", proxy.addr.port())
            ]
        );
        assert_eq!(proxy.refusals_since(1).len(), 1);
        assert_eq!(proxy.mark(), 2);
    }
}
