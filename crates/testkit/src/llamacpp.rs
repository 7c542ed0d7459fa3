//! A strict fake of llama.cpp's `llama-server`: its OpenAI-compatible
//! `POST /v1/chat/completions` (answered as [`crate::FakeOpenAi`] answers)
//! and `GET /props`, answered with the documented response
//! (`fixtures/llamacpp/props.json`).

use std::sync::{Arc, Mutex, PoisonError};

use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{self, CapturedRequest, Server, Shared};

/// A fake `llama-server` on `127.0.0.1`, serving one model with the
/// documented slot context of 1024 tokens until the test sets another.
#[derive(Debug)]
pub struct FakeLlamaCpp {
    shared: Arc<Shared>,
    n_ctx: Arc<Mutex<u64>>,
    server: Server,
}

impl FakeLlamaCpp {
    crate::server::scripted_fake_methods!();

    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let n_ctx = Arc::new(Mutex::new(1024));
        let for_handler = Arc::clone(&shared);
        let n_ctx_for_handler = Arc::clone(&n_ctx);
        let server = Server::start(
            "llamacpp",
            Arc::clone(&shared),
            Arc::new(move |request| {
                if request.path == "/props" {
                    props(&for_handler, &n_ctx_for_handler, request)
                } else {
                    crate::openai::answer(&for_handler, None, request)
                }
            }),
        );
        FakeLlamaCpp {
            shared,
            n_ctx,
            server,
        }
    }

    /// The base URL to configure, ending in `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// The context of one slot (`-c` divided by `--parallel`).
    pub fn set_n_ctx(&self, n_ctx: u64) {
        *self.n_ctx.lock().unwrap_or_else(PoisonError::into_inner) = n_ctx;
    }
}

/// `GET /props`. Changing properties (`POST`) needs a server started with
/// `--props`, which this one was not.
fn props(shared: &Shared, n_ctx: &Mutex<u64>, request: &CapturedRequest) -> Response {
    if request.method != "GET" {
        shared.violation(format!(
            "{} /props: the server was not started with --props, so /props is read-only",
            request.method
        ));
        return server::json(
            501,
            &json!({"error": {"code": 501, "message": "This server does not support changing global properties. Start it with `--props`", "type": "not_supported_error"}}),
        );
    }
    let n_ctx = *n_ctx.lock().unwrap_or_else(PoisonError::into_inner);
    server::json(200, &props_body(n_ctx))
}

fn props_body(n_ctx: u64) -> Value {
    let mut body: Value = match serde_json::from_str(crate::fixtures::LLAMACPP_PROPS) {
        Ok(body) => body,
        Err(error) => panic!("flynn-testkit: fixtures/llamacpp/props.json is not JSON: {error}"),
    };
    body["default_generation_settings"]["n_ctx"] = json!(n_ctx);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_answer_is_the_fixture_itself() {
        let fixture: Value = serde_json::from_str(crate::fixtures::LLAMACPP_PROPS).unwrap();
        assert_eq!(props_body(1024), fixture);
        assert_eq!(
            props_body(8192)["default_generation_settings"]["n_ctx"],
            8192
        );
    }
}
