//! Compaction tests on a real SQLite session store in a temp dir, with a
//! scripted summariser.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod boundaries;
mod chunks;
mod failures;
mod simulation;
mod writers;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flynn_context::{
    Budget, CompactionReport, CompactionSettings, Compactor, SUMMARY_PREFIX, Summariser,
};
use flynn_models::{Estimate, TokenCounter};
use flynn_protocol::{ContentBlock, Message, Role, SessionKey};
use flynn_sessions::Conversations;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The real SQLite store on a runtime of its own: tests of timeouts run
/// on a paused clock.
pub use flynn_testkit::store::RealTimeStore as TestStore;

pub fn key() -> SessionKey {
    "cli:default".parse().unwrap()
}

/// A store holding `history` under [`key`].
pub async fn store_with(history: &[Message]) -> Arc<TestStore> {
    let store = TestStore::open().await;
    store.append(&key(), history).await.unwrap();
    Arc::new(store)
}

pub async fn history(store: &TestStore) -> Vec<Message> {
    store
        .history(&key())
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message)
        .collect()
}

/// Estimated tokens of the stored history.
pub async fn history_tokens(store: &TestStore) -> usize {
    history(store)
        .await
        .iter()
        .map(|m| Estimate.count_message(m))
        .sum()
}

pub fn call(id: &str, command: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "shell.exec".into(),
            input: json!({ "command": command }),
        }],
    }
}

pub fn result(id: &str, content: &str, is_error: bool) -> Message {
    Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: content.into(),
            is_error,
        }],
    }
}

/// One turn: a question, `calls` tool calls each answered, an answer; the
/// text of each message padded to about `pad` bytes.
pub fn turn(n: usize, calls: usize, pad: usize) -> Vec<Message> {
    let fill = |s: String| {
        let len = s.len();
        s + &" lorem".repeat(pad.saturating_sub(len) / 6)
    };
    let mut messages = vec![Message::user(fill(format!("question {n}")))];
    for c in 0..calls {
        let id = format!("t{n}-{c}");
        messages.push(call(&id, &format!("ls dir{n}-{c}")));
        messages.push(result(
            &id,
            &fill(format!("files of dir{n}-{c}")),
            c % 2 == 1,
        ));
    }
    messages.push(Message::assistant(fill(format!("answer {n}"))));
    messages
}

/// What the scripted summariser does on one call.
pub enum Step {
    Answer(String),
    Fail(String),
    /// Does not answer for a day (the paused clock gets there at once
    /// when nothing times the call out), then fails.
    Hang,
    /// Appends messages to the store, then answers.
    Append(Arc<TestStore>, Vec<Message>, String),
    /// Fires the token, then hangs as [`Step::Hang`] does.
    Cancel(CancellationToken),
}

/// One call the summariser got.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub system: String,
    pub transcript: String,
    pub max_tokens: u32,
}

/// A summariser that follows a script, one step per call, answering
/// `summary <n>` once the script runs out; it records every call.
pub struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    calls: Mutex<Vec<Call>>,
    window: usize,
}

impl Scripted {
    pub fn new(window: usize, steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Scripted {
            steps: Mutex::new(steps.into()),
            calls: Mutex::new(Vec::new()),
            window,
        })
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Summariser for Scripted {
    async fn summarise(
        &self,
        system: &str,
        transcript: &str,
        max_tokens: u32,
    ) -> Result<String, String> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Call {
                system: system.to_owned(),
                transcript: transcript.to_owned(),
                max_tokens,
            });
            calls.len()
        };
        let step = self.steps.lock().unwrap().pop_front();
        match step {
            None => Ok(format!("summary {n}")),
            Some(Step::Answer(answer)) => Ok(answer),
            Some(Step::Fail(error)) => Err(error),
            Some(Step::Hang) => hang().await,
            Some(Step::Append(store, messages, answer)) => {
                store.append(&key(), &messages).await.unwrap();
                Ok(answer)
            }
            Some(Step::Cancel(token)) => {
                token.cancel();
                hang().await
            }
        }
    }

    fn window_tokens(&self) -> usize {
        self.window
    }
}

/// Waits a day, then fails: with the clock paused, a test whose code
/// under test forgot a timeout or a cancellation sees this error rather
/// than hanging.
async fn hang() -> Result<String, String> {
    tokio::time::sleep(Duration::from_secs(24 * 3_600)).await;
    Err("still waiting after a day".into())
}

pub fn settings(keep_turns: usize) -> CompactionSettings {
    CompactionSettings {
        keep_turns,
        ..CompactionSettings::default()
    }
}

pub fn compactor(settings: CompactionSettings, summariser: Arc<Scripted>) -> Compactor {
    Compactor::new(settings, summariser, &Estimate)
}

/// Compacts the session under [`key`], forced, with a fresh token.
pub async fn compact(
    compactor: &Compactor,
    store: &TestStore,
    budget: Budget,
) -> Option<CompactionReport> {
    compactor
        .compact(store, &key(), budget, true, &CancellationToken::new())
        .await
        .unwrap()
}

/// The summary message compaction stores.
pub fn summary_message(represented: usize, summary: &str) -> Message {
    Message::user(format!(
        "{SUMMARY_PREFIX} The conversation before this point was compacted ({represented} messages). Summary:\n\n{summary}"
    ))
}

/// The part of a stored summary after its header.
pub fn body(message: &Message) -> String {
    let text = message.text();
    text.split_once("Summary:\n\n").unwrap().1.to_owned()
}

/// A window so large nothing but the kept turns decides the cut.
pub const HUGE: Budget = Budget {
    window: 1_000_000,
    overhead: 0,
};

pub const MINUTE: Duration = Duration::from_secs(60);
