//! A server that answers every request with a redirect to another server,
//! recording what it was asked: for tests that a client with an API key in
//! a header does not follow it there (reqwest drops only `Authorization`,
//! `Cookie` and `Proxy-Authorization` on a redirect to another host).

use std::sync::Arc;

use axum::body::Body;

use crate::server::{self, CapturedRequest, Server, Shared};

/// Redirects every request to the same path on another origin.
#[derive(Debug)]
pub struct FakeRedirect {
    shared: Arc<Shared>,
    server: Server,
}

impl FakeRedirect {
    /// Answers every request with `status` (301, 302, 303, 307 or 308) and
    /// `Location: <target><request path>`, where `target` is an origin
    /// such as `http://127.0.0.1:4000`.
    pub fn start(status: u16, target: &str) -> Self {
        let target = target.trim_end_matches('/').to_owned();
        let shared = Arc::new(Shared::default());
        let server = Server::start(
            "redirect",
            Arc::clone(&shared),
            Arc::new(move |request: &CapturedRequest| {
                let location = format!("{target}{}", request.path);
                server::respond(status, &[("location", location.as_str())], Body::empty())
            }),
        );
        FakeRedirect { shared, server }
    }

    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }

    /// `http://127.0.0.1:<port>`, no trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.shared.requests()
    }
}
