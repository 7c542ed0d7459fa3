//! A strict fake of an Ollama server: its OpenAI-compatible
//! `POST /v1/chat/completions` (answered as [`crate::FakeOpenAi`] answers)
//! and its native `POST /api/show`, answered with the documented response
//! (`fixtures/ollama/show.json`) for the models the test adds.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{self, CapturedRequest, Server, Shared};

/// What `/api/show` says of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Model {
    context_length: u64,
    num_ctx: Option<u64>,
}

/// A fake Ollama server on `127.0.0.1`. It knows the documented model,
/// `llama3.2` (trained context 8192, no `num_ctx`), until the test adds
/// others.
#[derive(Debug)]
pub struct FakeOllama {
    shared: Arc<Shared>,
    models: Arc<Mutex<BTreeMap<String, Model>>>,
    server: Server,
}

impl FakeOllama {
    crate::server::scripted_fake_methods!();

    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let models = Arc::new(Mutex::new(BTreeMap::from([(
            "llama3.2".to_owned(),
            Model {
                context_length: 8192,
                num_ctx: None,
            },
        )])));
        let for_handler = Arc::clone(&shared);
        let models_for_handler = Arc::clone(&models);
        let server = Server::start(
            "ollama",
            Arc::clone(&shared),
            Arc::new(move |request| {
                if request.path == "/api/show" {
                    show(&for_handler, &models_for_handler, request)
                } else {
                    crate::openai::answer(&for_handler, None, request)
                }
            }),
        );
        FakeOllama {
            shared,
            models,
            server,
        }
    }

    /// The base URL to configure, ending in `/v1` (the OpenAI-compatible
    /// endpoint; the native API is beside it).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// Makes `name` known: its trained context length
    /// (`model_info["llama.context_length"]`) and, when set, the `num_ctx`
    /// parameter its Modelfile sets.
    pub fn add_model(&self, name: &str, context_length: u64, num_ctx: Option<u64>) {
        self.models
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                name.to_owned(),
                Model {
                    context_length,
                    num_ctx,
                },
            );
    }
}

/// `POST /api/show`.
fn show(
    shared: &Shared,
    models: &Mutex<BTreeMap<String, Model>>,
    request: &CapturedRequest,
) -> Response {
    if request.method != "POST" {
        shared.violation(format!(
            "{} /api/show: Ollama serves /api/show only to POST",
            request.method
        ));
        return server::json(405, &json!({"error": "method not allowed"}));
    }
    // `name` is the field's deprecated spelling; `model` is documented.
    let Some(name) = request.body["model"].as_str().filter(|m| !m.is_empty()) else {
        shared.violation(format!(
            "POST /api/show: the body must name the model as {{\"model\": ...}}, got {}",
            request.body
        ));
        return server::json(400, &json!({"error": "model is required"}));
    };
    // A name without a tag is the `latest` tag.
    let key = name.strip_suffix(":latest").unwrap_or(name);
    let model = models
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
        .copied();
    let Some(model) = model else {
        return server::json(404, &json!({"error": format!("model '{name}' not found")}));
    };
    server::json(200, &show_body(model))
}

/// The documented answer, describing `model`.
fn show_body(model: Model) -> Value {
    let mut body: Value = match serde_json::from_str(crate::fixtures::OLLAMA_SHOW) {
        Ok(body) => body,
        Err(error) => panic!("flynn-testkit: fixtures/ollama/show.json is not JSON: {error}"),
    };
    body["model_info"]["llama.context_length"] = json!(model.context_length);
    if let Some(num_ctx) = model.num_ctx {
        let parameters = body["parameters"].as_str().unwrap_or_default();
        // The documented layout: the name padded to 31 columns.
        body["parameters"] = json!(format!("{:<31}{num_ctx}\n{parameters}", "num_ctx"));
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_model_is_the_fixture_itself() {
        let fixture: Value = serde_json::from_str(crate::fixtures::OLLAMA_SHOW).unwrap();
        assert_eq!(
            show_body(Model {
                context_length: 8192,
                num_ctx: None
            }),
            fixture
        );
    }

    #[test]
    fn num_ctx_is_listed_as_ollama_lists_parameters() {
        let body = show_body(Model {
            context_length: 131_072,
            num_ctx: Some(32_768),
        });
        assert_eq!(body["model_info"]["llama.context_length"], 131_072);
        assert_eq!(
            body["parameters"]
                .as_str()
                .unwrap()
                .lines()
                .take(2)
                .collect::<Vec<_>>(),
            vec![
                "num_ctx                        32768",
                "num_keep                       24"
            ]
        );
    }
}
