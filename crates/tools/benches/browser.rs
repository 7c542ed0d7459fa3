//! What one browser tool call costs once the browser runs: a
//! `browser.snapshot` of a small local page (the form of the tests), over
//! CDP to the system's Chromium, through the tool's own code (lease,
//! accessibility tree, rendering, the frame check).
//!
//! - `browser/snapshot_small_page`: one call, after warm-up.
//!
//! `cargo bench -p flynn-tools --features browser --bench browser` (needs
//! Chromium: `scripts/install-test-deps.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use flynn_protocol::config::BrowserToolConfig;
use flynn_tools::ToolContext;
use flynn_tools::builtin::browser::{self, Browsers};
use serde_json::json;

const PAGE: &str = "<!doctype html><html><head><title>Order a shirt</title></head><body>\
<h1>Order a shirt</h1><p>Price: 12.50 EUR</p>\
<form action=\"/submit\" method=\"get\">\
<label>Name <input name=\"name\"></label>\
<label>Size <select name=\"size\"><option>Small</option><option>Medium</option><option>Large</option></select></label>\
<button type=\"submit\">Send order</button></form></body></html>";

fn snapshot_small_page(c: &mut Criterion) {
    if let Err(error) = browser::find_executable(None) {
        panic!("{error}; run scripts/install-test-deps.sh");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let config = BrowserToolConfig {
        allow_private: vec!["127.0.0.1".into()],
        ..BrowserToolConfig::default()
    };
    let browsers = Browsers::new(&config, home.path().join("browser"));
    let tools = browser::tools(&browsers);
    let tool = |name: &str| tools.iter().find(|t| t.name() == name).unwrap().clone();
    let (open, snapshot) = (tool("browser.open"), tool("browser.snapshot"));
    let ctx = ToolContext::new(workspace.path());
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/form", get(|| async { Html(PAGE) }));
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        open.call(json!({"url": format!("http://{addr}/form")}), &ctx)
            .await
            .unwrap();
        let first = snapshot.call(json!({}), &ctx).await.unwrap();
        assert!(first.contains("[3] button \"Send order\""), "{first}");
    });
    let mut group = c.benchmark_group("browser");
    group.bench_function("snapshot_small_page", |b| {
        b.iter(|| runtime.block_on(snapshot.call(json!({}), &ctx)).unwrap());
    });
    group.finish();
    runtime.block_on(browsers.shutdown());
}

criterion_group!(benches, snapshot_small_page);
criterion_main!(benches);
