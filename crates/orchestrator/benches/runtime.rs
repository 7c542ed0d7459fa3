//! What the runtime adds, and how fast cancel reaches a running turn.
//!
//! - `turn/overhead`: one whole turn through `SessionManager` (accept,
//!   start, prompt, model call, answer and usage stored, finish) against
//!   an in-process model that answers at once, on a real SQLite file, over
//!   64 sessions whose lanes stay up.
//! - `cancel/model_stream`: from `cancel()` to the turn's end while its
//!   model stream is waiting for the next event.
//! - `cancel/tool_process`: from `cancel()` to the turn's end while a
//!   `shell.exec` process (`sleep 30`) is running; the process group is
//!   killed.
//!
//! `cargo bench -p flynn-orchestrator --bench runtime`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use flynn_models::{
    ClientInfo, Error, ModelClient, ModelRequest, ModelResponse, ModelRouter, ModelStream,
    PriceTable, StopReason, StreamEvent,
};
use flynn_orchestrator::{Agents, RuntimeParts, SessionManager, Submitted, TurnRequest};
use flynn_protocol::config::{
    AgentsConfig, Autonomy, ModelsConfig, ProviderKind, SessionsConfig, TiersConfig, ToolsConfig,
};
use flynn_protocol::{ContentBlock, Message, Role, SessionKey, Usage};
use flynn_tools::ToolExecutor;
use serde_json::json;

#[derive(Clone, Copy)]
enum Mode {
    Answer,
    Hang,
    Sleep,
}

struct Model {
    info: ClientInfo,
    mode: Mode,
}

#[async_trait]
impl ModelClient for Model {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, Error> {
        let done = |message: Message, stop_reason| {
            Ok(StreamEvent::Completed(ModelResponse {
                message,
                stop_reason,
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 2,
                    ..Usage::default()
                },
                model: request.model.clone(),
            }))
        };
        let last_is_result = request.messages.last().is_some_and(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        });
        match self.mode {
            Mode::Answer => Ok(Box::pin(futures::stream::iter(vec![
                Ok(StreamEvent::TextDelta("ok".into())),
                done(Message::assistant("ok"), StopReason::EndTurn),
            ]))),
            Mode::Hang => Ok(Box::pin(futures::StreamExt::chain(
                futures::stream::iter(vec![Ok(StreamEvent::TextDelta("...".into()))]),
                futures::stream::pending(),
            ))),
            Mode::Sleep if last_is_result => Ok(Box::pin(futures::stream::iter(vec![done(
                Message::assistant("done"),
                StopReason::EndTurn,
            )]))),
            Mode::Sleep => Ok(Box::pin(futures::stream::iter(vec![done(
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "shell.exec".into(),
                        input: json!({"command": "sleep 30"}),
                    }],
                },
                StopReason::ToolUse,
            )]))),
        }
    }
}

async fn manager(dir: &std::path::Path, mode: Mode) -> SessionManager {
    let store = Arc::new(
        flynn_sessions::SqliteStore::open(&dir.join("bench.db"))
            .await
            .unwrap(),
    );
    let mut clients: HashMap<String, Arc<dyn ModelClient>> = HashMap::new();
    clients.insert(
        "m".into(),
        Arc::new(Model {
            info: ClientInfo::new("m", ProviderKind::OpenaiCompatible, false),
            mode,
        }),
    );
    let models = ModelsConfig {
        tiers: TiersConfig {
            default: vec!["m/one".parse().unwrap()],
            ..TiersConfig::default()
        },
        ..ModelsConfig::default()
    };
    // The cancel bench's shell.exec runs without asking.
    let tools = ToolsConfig {
        autonomy: Autonomy::Full,
        ..ToolsConfig::default()
    };
    SessionManager::new(RuntimeParts {
        router: Arc::new(ModelRouter::new(clients, models)),
        store,
        executor: ToolExecutor::from_config(
            Arc::new(flynn_tools::builtin::registry(&tools)),
            &tools,
        ),
        agents: Agents::from_config(&AgentsConfig::default(), &tools, dir).unwrap(),
        prices: PriceTable::default(),
        max_tokens: 1024,
        sessions: SessionsConfig::default(),
        delegation: flynn_orchestrator::DelegationSettings::default(),
        compaction: flynn_protocol::config::CompactionConfig::default(),
        memory_flush: None,
        memory: None,
    })
}

async fn submit(manager: &SessionManager, key: &SessionKey) -> flynn_orchestrator::TurnHandle {
    match manager
        .submit(TurnRequest::text(key.clone(), "go"))
        .await
        .unwrap()
    {
        Submitted::Turn(handle) => handle,
        Submitted::Command { .. } => unreachable!(),
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    let answer = runtime.block_on(manager(dir.path(), Mode::Answer));
    // 64 sessions in turn, as a daemon with that many active chats; each
    // is reset (untimed) before it is used again, so histories stay short.
    let keys: Vec<SessionKey> = (0..64)
        .map(|i| format!("bench:{i}").parse().unwrap())
        .collect();
    let mut n = 0_usize;
    let mut group = c.benchmark_group("turn");
    group.bench_function("overhead", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let key = &keys[n % keys.len()];
                    answer.store().clear(key).await.unwrap();
                    let started = Instant::now();
                    submit(&answer, key).await.outcome().await.unwrap();
                    total += started.elapsed();
                }
                total
            })
        });
    });
    group.finish();

    let mut group = c.benchmark_group("cancel");
    group.sample_size(20);
    for (name, mode) in [("model_stream", Mode::Hang), ("tool_process", Mode::Sleep)] {
        let dir = tempfile::tempdir().unwrap();
        let manager = runtime.block_on(manager(dir.path(), mode));
        let mut n = 0_u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        n += 1;
                        let key: SessionKey = format!("bench:{n}").parse().unwrap();
                        let mut events = manager.subscribe(&key);
                        let handle = submit(&manager, &key).await;
                        // Wait until the stream or the tool is running.
                        loop {
                            let event = events.next().await.unwrap().unwrap().event;
                            match (mode, event) {
                                (Mode::Hang, flynn_protocol::AgentEvent::ContentDelta { .. }) => {
                                    break;
                                }
                                (Mode::Sleep, flynn_protocol::AgentEvent::ToolStart { .. }) => {
                                    // Give sh a moment to exec the sleep.
                                    tokio::time::sleep(Duration::from_millis(5)).await;
                                    break;
                                }
                                _ => {}
                            }
                        }
                        let started = Instant::now();
                        assert!(manager.cancel(&key));
                        let _ = handle.outcome().await;
                        total += started.elapsed();
                    }
                    total
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
