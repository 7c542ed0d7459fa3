//! A web site for the agent to read: fixed HTML pages by path, every
//! request recorded (path and query), `404` for anything else. What an
//! attacker's page looks like to `web.fetch`, and where it would send what
//! it stole.

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::server::Server;

/// See the module docs.
#[derive(Debug)]
pub struct FakeSite {
    server: Server,
    requests: Arc<Mutex<Vec<String>>>,
}

impl FakeSite {
    /// Serves each `(path, html)` page as `text/html`.
    pub fn start(pages: &[(&str, &str)]) -> FakeSite {
        let pages: Arc<Vec<(String, String)>> = Arc::new(
            pages
                .iter()
                .map(|(path, html)| ((*path).to_owned(), (*html).to_owned()))
                .collect(),
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let router = Router::new().fallback(move |request: Request| {
            let pages = Arc::clone(&pages);
            let seen = Arc::clone(&seen);
            async move { answer(&pages, &seen, &request) }
        });
        FakeSite {
            server: Server::start_router("site", router),
            requests,
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.addr())
    }

    /// Every request so far, as `path` or `path?query`, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn answer(pages: &[(String, String)], seen: &Mutex<Vec<String>>, request: &Request) -> Response {
    let uri = request.uri();
    let target = match uri.query() {
        Some(query) => format!("{}?{query}", uri.path()),
        None => uri.path().to_owned(),
    };
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(target);
    match pages.iter().find(|(path, _)| path == uri.path()) {
        Some((_, html)) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html.clone(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such page").into_response(),
    }
}
