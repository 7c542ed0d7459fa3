//! What the router adds to a call: the same in-process model, answering at
//! once, called directly and through `ModelRouter` (chain lookup, breaker
//! permit, first-event wait, the watching stream), and through a failover
//! from a model whose key is rejected.
//!
//! `cargo bench -p flynn-models --bench router`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use flynn_models::{Error, ModelClient, ModelRequest, ModelRouter, drain};
use flynn_protocol::config::{ModelsConfig, TiersConfig};
use flynn_protocol::{Message, Tier, Usage};
use flynn_testkit::scripted::ScriptedModel;

/// Answers "Hello!" at once, in two events; or refuses the key.
fn client(name: &str, refuse: bool) -> Arc<dyn ModelClient> {
    let provider = name.to_owned();
    ScriptedModel::builder(name)
        .local()
        .unrecorded()
        .usage(Usage::default())
        .answer(move |_| {
            if refuse {
                return Err(Error::Auth {
                    provider: provider.clone(),
                    status: 401,
                    message: "invalid x-api-key".into(),
                    env: Some("ANTHROPIC_API_KEY"),
                });
            }
            Ok(Message::assistant("Hello!"))
        })
        .build()
}

fn router(default: &[&str]) -> ModelRouter {
    let clients = HashMap::from([
        ("fast".to_owned(), client("fast", false)),
        ("refused".to_owned(), client("refused", true)),
    ]);
    let models = ModelsConfig {
        tiers: TiersConfig {
            default: default.iter().map(|m| m.parse().unwrap()).collect(),
            ..TiersConfig::default()
        },
        ..ModelsConfig::default()
    };
    ModelRouter::new(clients, models)
}

fn request() -> ModelRequest<'static> {
    ModelRequest::new(
        "",
        vec![
            Message::user("What is the capital of France?"),
            Message::assistant("Paris."),
            Message::user("And of Italy?"),
        ],
    )
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let direct = client("fast", false);
    let routed = router(&["fast/m"]);
    let failover = router(&["refused/m", "fast/m"]);
    let request = request();

    let mut group = c.benchmark_group("router");
    group.bench_function("direct", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut request = request.clone();
                request.model = "m".into();
                let stream = direct.stream(request).await.unwrap();
                black_box(drain("fast", stream).await.unwrap())
            })
        })
    });
    group.bench_function("routed", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let routed = routed.stream(Tier::Default, request.clone()).await.unwrap();
                black_box(drain("fast", routed.stream).await.unwrap())
            })
        })
    });
    group.bench_function("routed_after_failover", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let routed = failover
                    .stream(Tier::Default, request.clone())
                    .await
                    .unwrap();
                assert_eq!(routed.failed.len(), 1);
                black_box(drain("fast", routed.stream).await.unwrap())
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
