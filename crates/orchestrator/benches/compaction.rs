//! Compaction's cost: compacting a 200,000-token history (time, and the
//! tokens sent to the summariser), and the share of a long conversation's
//! tokens that go to the fast tier. The two counts are written to
//! `criterion/flynn-compaction.json` for `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use flynn_context::{Budget, COMPACTION_PROMPT, CompactionSettings, Compactor, Summariser};
use flynn_models::{Estimate, TokenCounter};
use flynn_orchestrator::{Submitted, TurnRequest};
use flynn_protocol::config::ToolsConfig;
use flynn_protocol::{ContentBlock, Message, Role, SessionKey, Tier, Usage};
use flynn_sessions::{Conversations, SqliteStore, UsageLog};
use flynn_testkit::runtime::{Setup, manager, tiers};
use flynn_testkit::scripted::ScriptedModel;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Answers at once with a 400-token summary; its window is 128k tokens.
struct Instant;

#[async_trait]
impl Summariser for Instant {
    async fn summarise(&self, _: &str, transcript: &str, _: u32) -> Result<String, String> {
        Ok(transcript.chars().take(1_600).collect())
    }

    fn window_tokens(&self) -> usize {
        128_000
    }
}

/// About 200,000 tokens: 500 exchanges of a question, a tool call, its
/// 1,200-byte result and an answer.
fn long_history() -> Vec<Message> {
    let mut history = Vec::new();
    for i in 0..500 {
        history.push(Message::user(format!(
            "question {i}: {}",
            "what about the deploy? ".repeat(12)
        )));
        history.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: format!("c{i}"),
                name: "file.read".into(),
                input: json!({"path": format!("notes/{i}.md")}),
            }],
        });
        history.push(Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: format!("c{i}"),
                content: "line of notes about the release plan\n".repeat(32),
                is_error: false,
            }],
        });
        history.push(Message::assistant(format!(
            "answer {i}: {}",
            "the deploy is on Friday after the checks. ".repeat(4)
        )));
    }
    history
}

async fn seeded_store(path: &Path, key: &SessionKey, history: &[Message]) {
    let store = SqliteStore::open(path).await.unwrap();
    store.append(key, history).await.unwrap();
    // Everything in the main file, so a copy of it is whole.
    store.close().await;
}

fn compaction(c: &mut Criterion, stats: &mut serde_json::Map<String, serde_json::Value>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed.db");
    let key: SessionKey = "cli:bench".parse().unwrap();
    let history = long_history();
    let tokens = Estimate.count_request(None, &history, &[]);
    rt.block_on(seeded_store(&seed, &key, &history));
    let compactor = Compactor::new(CompactionSettings::default(), Arc::new(Instant), &Estimate);
    let budget = || Budget {
        window: tokens * 100 / 80,
        overhead: 2_000,
    };
    let run = |path: &Path| {
        rt.block_on(async {
            let store = SqliteStore::open(path).await.unwrap();
            compactor
                .compact(&store, &key, budget(), false, &CancellationToken::new())
                .await
                .unwrap()
                .expect("a 200k-token history at 80% of the window compacts")
        })
    };
    // One run for the counts.
    let copy = dir.path().join("once.db");
    std::fs::copy(&seed, &copy).unwrap();
    let report = run(&copy);
    stats.insert("history_tokens".into(), json!(tokens));
    stats.insert("summariser_tokens".into(), json!(report.summariser_tokens));
    stats.insert("summariser_calls".into(), json!(report.chunks));
    stats.insert("tokens_after".into(), json!(report.tokens_after));

    let mut n = 0;
    let mut group = c.benchmark_group("compaction");
    group.bench_function("history_200k_tokens", |b| {
        b.iter_batched(
            || {
                n += 1;
                let path = dir.path().join(format!("run{n}.db"));
                std::fs::copy(&seed, &path).unwrap();
                path
            },
            |path| run(&path),
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

/// A model that bills what it is sent (estimated) and answers with about
/// 150 tokens, or a 400-token summary when asked to compact; 16k window.
fn billing(name: &str) -> Arc<ScriptedModel> {
    ScriptedModel::builder(name)
        .unrecorded()
        .answer(|request| {
            Ok(Message::assistant(
                if request.system.as_deref() == Some(COMPACTION_PROMPT) {
                    "summary of what was said so far. ".repeat(48)
                } else {
                    "a reply with some detail in it. ".repeat(19)
                },
            ))
        })
        .usage_by(|request, reply| Usage {
            input_tokens: Estimate.count_request(
                request.system.as_deref(),
                &request.messages,
                &request.tools,
            ) as u64,
            output_tokens: Estimate.count_text(&reply.text()) as u64,
            ..Usage::default()
        })
        .build()
}

/// Runs a 300-turn conversation (messages of about 200 tokens) on a
/// 16k-token default model with compaction on the fast tier, and returns
/// the fast tier's share of all tokens billed.
fn fast_share(stats: &mut serde_json::Map<String, serde_json::Value>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let mut models = tiers(&["m/big"]);
        models.tiers.fast = vec!["f/small".parse().unwrap()];
        models.context_windows.insert("m/big".into(), 16_384);
        models.context_windows.insert("f/small".into(), 16_384);
        let setup = Setup {
            models,
            tools: ToolsConfig {
                enabled: Some(vec!["file.read".into()]),
                ..ToolsConfig::default()
            },
            ..Setup::default()
        };
        let manager = manager(
            dir.path(),
            store.clone(),
            vec![billing("m"), billing("f")],
            setup,
        );
        let key: SessionKey = "cli:share".parse().unwrap();
        for i in 0..300 {
            let text = format!(
                "message {i}: {}",
                "tell me more about the plan. ".repeat(27)
            );
            let Submitted::Turn(handle) = manager
                .submit(TurnRequest::text(key.clone(), text))
                .await
                .unwrap()
            else {
                panic!("a turn");
            };
            handle.outcome().await.unwrap();
        }
        let mut fast = 0u64;
        let mut all = 0u64;
        for (tier, total) in store.usage_by_tier(None).await.unwrap() {
            let tokens = total.usage.input_tokens + total.usage.output_tokens;
            all += tokens;
            if tier == Tier::Fast {
                fast += tokens;
            }
        }
        manager.shutdown().await;
        stats.insert("conversation_turns".into(), json!(300));
        stats.insert("fast_tokens".into(), json!(fast));
        stats.insert("all_tokens".into(), json!(all));
    });
}

fn benches(c: &mut Criterion) {
    let mut stats = serde_json::Map::new();
    compaction(c, &mut stats);
    fast_share(&mut stats);
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        std::path::PathBuf::from,
    );
    let dir = target.join("criterion");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("flynn-compaction.json"),
        serde_json::Value::Object(stats).to_string(),
    )
    .unwrap();
}

criterion_group!(group, benches);
criterion_main!(group);
