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

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use flynn_orchestrator::{SessionManager, Submitted, TurnRequest};
use flynn_protocol::{ContentBlock, Message, SessionKey, Usage};
use flynn_testkit::runtime::with_model;
use flynn_testkit::scripted::{ScriptedModel, tool_use};

#[derive(Clone, Copy)]
enum Mode {
    Answer,
    Hang,
    Sleep,
}

/// A runtime over one scripted model (recording nothing) that answers at
/// once, hangs mid-stream, or runs `sleep 30` in `shell.exec` first.
async fn manager(dir: &std::path::Path, mode: Mode) -> SessionManager {
    let model = ScriptedModel::builder("m").unrecorded().usage(Usage {
        input_tokens: 10,
        output_tokens: 2,
        ..Usage::default()
    });
    let model = match mode {
        Mode::Answer => model.answer(|_| Ok(Message::assistant("ok"))),
        Mode::Hang => model.then_hang("..."),
        Mode::Sleep => model.answer(|request| {
            let last_is_result = request.messages.last().is_some_and(|m| {
                m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
            });
            Ok(if last_is_result {
                Message::assistant("done")
            } else {
                tool_use("t1", "sleep 30")
            })
        }),
    };
    // The harness's tools run without asking, as the cancel bench's
    // `shell.exec` must.
    let (manager, _store) = with_model(dir, model.build()).await;
    manager
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
