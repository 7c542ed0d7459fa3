//! Draining: new messages are refused at once, running turns finish,
//! clients see them end.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_core::{ToolContext, ToolError, TypedTool};
use flynn_testkit::{FakeOpenAi, Reply};
use jsonrpsee::core::client::{ClientT, Subscription, SubscriptionClientT};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::harness::*;

/// A tool that takes a while.
struct Slow;

#[derive(Deserialize, JsonSchema)]
struct SlowArgs {}

#[async_trait]
impl TypedTool for Slow {
    type Args = SlowArgs;
    fn name(&self) -> &str {
        "slow.wait"
    }
    fn description(&self) -> &str {
        "Waits a moment."
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn effect(&self) -> flynn_core::protocol::ToolEffect {
        flynn_core::protocol::ToolEffect::ReadOnly
    }
    async fn run(&self, _args: SlowArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok("waited".into())
    }
}

#[tokio::test]
async fn a_graceful_shutdown_lets_the_running_turn_finish_and_refuses_new_messages() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![("slow_wait".into(), json!({}))]));
    fake.push(Reply::Text("finished after the wait".into()));
    let mut harness = Harness::with(Options {
        config: config(&fake),
        tools: vec![flynn_core::tools::into_dyn(Slow)],
        config_file: None,
    })
    .await;
    let client = harness.ws().await;
    let other = harness.ws().await;
    let mut sub: Subscription<Value> = client
        .subscribe(
            "agent.send",
            params(json!({"session": "web:s", "message": "wait for it"})),
            "agent.unsubscribe",
        )
        .await
        .unwrap();
    loop {
        let event: Value = sub.next().await.unwrap().unwrap();
        if event["type"] == "tool_start" {
            break;
        }
    }
    let manager = harness.flynn.manager().clone();
    let draining = manager.clone();
    let drain = tokio::spawn(async move { manager.drain(Duration::from_secs(10)).await });
    tokio::time::timeout(Duration::from_secs(10), async {
        while !draining.is_draining() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the drain started");
    let refused = other
        .request::<Value, _>(
            "sessions.send",
            params(json!({"session": "web:t", "message": "late"})),
        )
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("shutting down"), "{refused}");
    let health = reqwest::get(harness.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 503);

    let rest = collect_turn(&mut sub).await;
    assert_eq!(
        kinds(&rest).last().map(String::as_str),
        Some("run_state:complete")
    );
    assert!(text(&rest).contains("finished after the wait"));
    assert_eq!(drain.await.unwrap(), 0, "nothing was cut short");
    let history = harness
        .flynn
        .sessions()
        .history(&"web:s".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(history.len(), 4);
    let web_t = harness
        .flynn
        .sessions()
        .history(&"web:t".parse().unwrap())
        .await
        .unwrap();
    assert!(web_t.is_empty(), "the refused message was not stored");
    let _ = Arc::new(());
    harness.stop().await;
}
