//! The real model clients against the strict fake servers of
//! `flynn-testkit`: one module per provider, plus the transport failures
//! both share.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
mod bedrock;
mod conformance;
mod context_windows;
mod hub;
mod local;
mod openai;
mod presets;
mod probe;
mod router;
mod transport;

use std::sync::Arc;

use flynn_models::{Error, ModelClient, ModelRequest, ModelResponse, StreamEvent, build_client};
use flynn_protocol::ToolSpec;
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use futures::StreamExt;
use serde_json::json;

/// A provider config pointing at `base_url`.
fn config(kind: ProviderKind, base_url: &str, api_key: Option<&str>) -> ProviderConfig {
    let mut config = ProviderConfig::new(kind);
    config.base_url = Some(base_url.to_owned());
    config.api_key = api_key.map(str::to_owned);
    config
}

fn client(name: &str, config: &ProviderConfig) -> Arc<dyn ModelClient> {
    build_client(name, config).unwrap()
}

/// The dotted tool every test offers.
fn shell_tool() -> ToolSpec {
    ToolSpec {
        name: "shell.exec".into(),
        description: "Run a shell command".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"]
        })
        .into(),
    }
}

/// Streams one call: the deltas, then the assembled response or the error
/// that ended it. Checks that nothing follows `Completed`.
async fn run(
    client: &Arc<dyn ModelClient>,
    request: ModelRequest<'_>,
) -> (Vec<StreamEvent>, Result<ModelResponse, Error>) {
    let mut stream = match client.stream(request).await {
        Ok(stream) => stream,
        Err(error) => return (Vec::new(), Err(error)),
    };
    let mut deltas = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamEvent::Completed(response)) => {
                assert!(
                    stream.next().await.is_none(),
                    "the stream went on after Completed"
                );
                return (deltas, Ok(response));
            }
            Ok(delta) => deltas.push(delta),
            Err(error) => {
                assert!(
                    stream.next().await.is_none(),
                    "the stream went on after an error"
                );
                return (deltas, Err(error));
            }
        }
    }
    panic!("the stream ended without Completed or an error (deltas: {deltas:?})");
}

/// The error of a call that must fail, whether before or during the stream.
async fn failure(client: &Arc<dyn ModelClient>, request: ModelRequest<'_>) -> Error {
    match run(client, request).await {
        (_, Err(error)) => error,
        (_, Ok(response)) => panic!("expected an error, got {response:?}"),
    }
}
