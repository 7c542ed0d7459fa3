//! What the executor adds to a tool call: lookup, policy, hooks and
//! autonomy, the timeout and cancellation race, redaction of configured
//! secrets, truncation, and one audit record written to a real file.
//!
//! - `tools/executor_call`: one call of a tool that returns at once.
//!
//! `cargo bench -p flynn-tools --bench executor`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use flynn_protocol::config::{Autonomy, ToolsConfig};
use flynn_protocol::{ToolCall, ToolEffect};
use flynn_tools::{
    AuditLog, Redactor, ToolContext, ToolError, ToolExecutor, ToolPolicy, ToolRegistry, TypedTool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

struct Echo;

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    text: String,
}

#[async_trait]
impl TypedTool for Echo {
    type Args = EchoArgs;
    fn name(&self) -> &str {
        "test.echo"
    }
    fn description(&self) -> &str {
        "Echo the text."
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }
    async fn run(&self, args: EchoArgs, _: &ToolContext) -> Result<String, ToolError> {
        Ok(args.text)
    }
}

fn executor_call(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut registry = ToolRegistry::new();
    registry.register(Echo);
    let tools = ToolsConfig {
        autonomy: Autonomy::Supervised,
        ..ToolsConfig::default()
    };
    let executor = ToolExecutor::from_config(Arc::new(registry), &tools)
        .with_redactor(Redactor::new(["sk-bench-0123456789abcdef"]))
        .with_audit(Arc::new(AuditLog::new(home.path(), 64 << 20, 1)));
    let ctx = ToolContext {
        policy: Arc::new(ToolPolicy::new(&tools, None)),
        ..ToolContext::new(home.path())
    };
    let call = ToolCall {
        id: "call-1".into(),
        name: "test.echo".into(),
        arguments: json!({"text": "a line of output of a typical small size, say eighty bytes."}),
    };
    let mut group = c.benchmark_group("tools");
    group.bench_function("executor_call", |b| {
        b.iter(|| runtime.block_on(executor.execute(&call, &ctx)));
    });
    group.finish();
}

criterion_group!(benches, executor_call);
criterion_main!(benches);
