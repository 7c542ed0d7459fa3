//! A tool that attaches an image (as `browser.screenshot` does), end to
//! end against the strict fakes of the real wire formats: the image goes
//! after the tool results for Anthropic, as a user message after the
//! `tool` messages for OpenAI, not at all to a model that does not read
//! images, and not again in a later turn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_models::ModelClient;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use flynn_sessions::SqliteStore;
use flynn_testkit::runtime::Harness;
use flynn_testkit::{CapturedRequest, FakeAnthropic, FakeOpenAi, Reply};
use flynn_tools::{ToolContext, ToolError, TypedTool, into_dyn, wrap_untrusted};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::*;

/// A PNG header of 16 x 16 pixels; [`PNG_BASE64`] in base64.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x10\0\0\0\x10";
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAABAAAAAQ";

/// A fake screenshot tool: untrusted output, and the PNG attached.
struct Screenshot;

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[async_trait]
impl TypedTool for Screenshot {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "test.screenshot"
    }
    fn description(&self) -> &str {
        "Take a screenshot."
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }
    fn untrusted_output(&self) -> bool {
        true
    }
    async fn run(&self, _: NoArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        ctx.attach_image("image/png", PNG.to_vec());
        Ok("Saved screenshots/s.png".to_owned())
    }
}

/// What the model reads as the tool's result.
fn result_text() -> String {
    format!(
        "{}\n[an image (image/png, 24 bytes) is attached after the tool results]",
        wrap_untrusted("test.screenshot", "Saved screenshots/s.png")
    )
}

/// A runtime whose default tier is `provider/model`, served by `client`.
async fn harness(provider: &str, model: &str, client: Arc<dyn ModelClient>) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let setup = Setup {
        models: tiers(&[&format!("{provider}/{model}")]),
        extra_tools: vec![into_dyn(Screenshot)],
        ..Setup::default()
    };
    let clients = HashMap::from([(provider.to_owned(), client)]);
    let manager = manager_with(dir.path(), store.clone(), clients, setup);
    Harness {
        dir,
        manager,
        store,
    }
}

fn client(kind: ProviderKind, base_url: String) -> Arc<dyn ModelClient> {
    let mut config = ProviderConfig::new(kind);
    config.base_url = Some(base_url);
    config.api_key = Some("key".to_owned());
    flynn_models::build_client("p", &config).unwrap()
}

/// The messages of each request, without the system prompt.
fn messages(requests: &[CapturedRequest]) -> Vec<Value> {
    requests
        .iter()
        .map(|request| {
            let mut messages = request.body["messages"].as_array().unwrap().clone();
            messages.retain(|m| m["role"] != "system");
            Value::Array(messages)
        })
        .collect()
}

#[tokio::test]
async fn anthropic_gets_the_image_after_the_tool_result_once() {
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "test_screenshot".into(),
        json!({}),
    )]));
    fake.push(Reply::Text("A login form.".into()));
    fake.push(Reply::Text("Yes.".into()));
    let harness = harness(
        "p",
        "claude-sonnet-4-5",
        client(ProviderKind::Anthropic, fake.base_url()),
    )
    .await;
    let key = key("test:images");
    let (outcome, _) = harness.send(&key, "what is on the page?").await;
    assert_eq!(outcome.unwrap().reply, "A login form.");
    let (outcome, _) = harness.send(&key, "sure?").await;
    assert_eq!(outcome.unwrap().reply, "Yes.");
    assert_eq!(fake.violations(), Vec::<String>::new());

    let sent = messages(&fake.requests());
    assert_eq!(sent.len(), 3);
    let call = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_01", "name": "test_screenshot", "input": {}}
    ]});
    assert_eq!(
        sent[1],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "what is on the page?"}]},
            call,
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": result_text(), "is_error": false},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64},
                 "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
    // The next turn says the image was shown, and sends it no more.
    assert_eq!(
        sent[2][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "is_error": false,
             "content": format!("{}\n{}", result_text(), flynn_context::FADED_IMAGE)}
        ]})
    );
    // The session keeps the image, and the turn's taint.
    let stored = harness.history(&key).await;
    assert!(stored[2].has_images(), "{:?}", stored[2]);
    let meta = flynn_sessions::Conversations::metadata(harness.store.as_ref(), &key)
        .await
        .unwrap();
    assert!(meta.taint.is_some());
}

#[tokio::test]
async fn openai_gets_the_image_in_a_user_message_after_the_tool_message() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "test_screenshot".into(),
        json!({}),
    )]));
    fake.push(Reply::Text("A login form.".into()));
    let harness = harness("p", "gpt-4o", client(ProviderKind::Openai, fake.base_url())).await;
    let (outcome, _) = harness
        .send(&key("test:images"), "what is on the page?")
        .await;
    assert_eq!(outcome.unwrap().reply, "A login form.");
    assert_eq!(fake.violations(), Vec::<String>::new());

    let sent = messages(&fake.requests());
    assert_eq!(
        sent[1],
        json!([
            {"role": "user", "content": "what is on the page?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "test_screenshot", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": result_text()},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}")}}
            ]}
        ])
    );
}

#[tokio::test]
async fn a_model_that_does_not_read_images_gets_a_note_instead() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "test_screenshot".into(),
        json!({}),
    )]));
    fake.push(Reply::Text("I cannot see it.".into()));
    let harness = harness(
        "p",
        "gpt-3.5-turbo",
        client(ProviderKind::Openai, fake.base_url()),
    )
    .await;
    let (outcome, _) = harness
        .send(&key("test:images"), "what is on the page?")
        .await;
    assert_eq!(outcome.unwrap().reply, "I cannot see it.");
    assert_eq!(fake.violations(), Vec::<String>::new());

    let sent = messages(&fake.requests());
    // The tool message is the last: no user message of images follows.
    assert_eq!(
        sent[1].as_array().unwrap()[2..],
        [
            json!({"role": "tool", "tool_call_id": "call_1", "content": format!(
                "{}\n[an image is not shown here: p/gpt-3.5-turbo does not read images (set models.image_input.\"p/gpt-3.5-turbo\": true if it does)]",
                result_text()
            )})
        ]
    );
}
