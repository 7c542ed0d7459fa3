//! [`ScriptedModel`]: a model client that answers from a script, for the
//! tests and benchmarks of the model router and everything above it
//! (feature `models`).
//!
//! Each call takes the next [`Script`] step; with none left, the model
//! echoes the last user text as `re: <text>` (or does what its builder
//! said: answer with a function, hang, or refuse). It records every
//! request, and when each call started and ended, so a test can check
//! ordering and concurrency. A gate or a delay holds calls back.

// Test support: a step that cannot be done is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flynn_models::{
    ClientInfo, Error as ModelError, ModelClient, ModelRequest, ModelResponse, ModelStream,
    StopReason, StreamEvent,
};
use flynn_protocol::config::ProviderKind;
use flynn_protocol::{ContentBlock, Message, Role, Usage};
use serde_json::json;
use tokio::sync::Semaphore;
// Tokio's clock, so call times follow a paused clock in tests that pause it.
use tokio::time::Instant;

/// What a scripted model does for one call.
pub enum Script {
    /// A whole answer: its text as one delta, then `Completed`. An error
    /// refuses the call before anything streams.
    Reply(Result<Message, ModelError>),
    /// Streams this text, then never finishes (until dropped).
    Hang(String),
    /// Streams this text (nothing when empty), then fails with this error.
    Break(String, ModelError),
    /// Streams this text, then ends without `Completed`.
    Cut(String),
}

/// Answers a request.
type AnswerFn = Box<dyn Fn(&ModelRequest) -> Result<Message, ModelError> + Send + Sync>;
/// The usage of a request and its answer.
type BillFn = Box<dyn Fn(&ModelRequest, &Message) -> Usage + Send + Sync>;

/// What the model does once its script is used up.
enum Otherwise {
    /// `re: <last user text>`.
    Echo,
    /// The function's answer.
    Answer(AnswerFn),
    /// Streams this text, then never finishes.
    Hang(String),
    /// Refuses the call: the test expected no more calls.
    Refuse,
}

/// The usage an answer reports.
enum Billing {
    Fixed(Usage),
    By(BillFn),
}

/// One call, as the model saw it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The last user text of the request.
    pub text: String,
    /// When the call came.
    pub at: Instant,
    /// The order of the call's start and end among every start and end
    /// (one counter), so two calls overlapped when each started before
    /// the other ended.
    pub started: usize,
    pub ended: Option<usize>,
}

impl Call {
    /// Whether the two calls were in flight at the same time.
    pub fn overlaps(&self, other: &Call) -> bool {
        let ends_after = |call: &Call, start: usize| call.ended.is_none_or(|end| end > start);
        ends_after(self, other.started) && ends_after(other, self.started)
    }
}

/// A model that answers from a script and records what it was asked.
pub struct ScriptedModel {
    info: ClientInfo,
    script: Mutex<VecDeque<Script>>,
    otherwise: Otherwise,
    usage: Billing,
    gate: Option<Arc<Semaphore>>,
    delay: Duration,
    /// Whether requests and calls are kept (not in benchmarks).
    record: bool,
    pub requests: Mutex<Vec<ModelRequest<'static>>>,
    calls: Mutex<Vec<Call>>,
    ticks: AtomicUsize,
    created: Instant,
    /// Extra deltas streamed before each answer (for lag tests).
    pub extra_deltas: Mutex<usize>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("provider", &self.info.provider)
            .field("left", &self.left())
            .finish_non_exhaustive()
    }
}

/// Builds a [`ScriptedModel`] that does more than answer in turn.
pub struct ScriptedBuilder {
    model: ScriptedModel,
}

impl ScriptedBuilder {
    /// The steps, taken one per call.
    pub fn script(mut self, script: Vec<Script>) -> Self {
        self.model.script = Mutex::new(script.into());
        self
    }

    /// With the script used up, answers with `answer`'s message.
    pub fn answer(
        mut self,
        answer: impl Fn(&ModelRequest) -> Result<Message, ModelError> + Send + Sync + 'static,
    ) -> Self {
        self.model.otherwise = Otherwise::Answer(Box::new(answer));
        self
    }

    /// With the script used up, streams `text` and never finishes.
    pub fn then_hang(mut self, text: &str) -> Self {
        self.model.otherwise = Otherwise::Hang(text.to_owned());
        self
    }

    /// With the script used up, refuses every call (a configuration
    /// error naming the provider).
    pub fn strict(mut self) -> Self {
        self.model.otherwise = Otherwise::Refuse;
        self
    }

    /// Each call first takes a permit (and keeps it): it waits until the
    /// test adds one.
    pub fn gate(mut self, gate: Arc<Semaphore>) -> Self {
        self.model.gate = Some(gate);
        self
    }

    /// Each call waits this long before it answers.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.model.delay = delay;
        self
    }

    /// The usage every answer reports (default: 10 tokens in, 3 out).
    pub fn usage(mut self, usage: Usage) -> Self {
        self.model.usage = Billing::Fixed(usage);
        self
    }

    /// Each answer reports the usage `bill` gives for the request and
    /// the answer (an estimate of both, say).
    pub fn usage_by(
        mut self,
        bill: impl Fn(&ModelRequest, &Message) -> Usage + Send + Sync + 'static,
    ) -> Self {
        self.model.usage = Billing::By(Box::new(bill));
        self
    }

    /// Runs on this machine, as the router sees it (`ClientInfo::local`).
    pub fn local(mut self) -> Self {
        self.model.info = ClientInfo::new(
            &self.model.info.provider,
            ProviderKind::OpenaiCompatible,
            true,
        );
        self
    }

    /// Keeps no requests and no calls: for benchmarks, which make more
    /// calls than a test and should not time the copies.
    pub fn unrecorded(mut self) -> Self {
        self.model.record = false;
        self
    }

    pub fn build(self) -> Arc<ScriptedModel> {
        Arc::new(self.model)
    }
}

impl ScriptedModel {
    /// A model (provider `name`) that echoes once nothing is scripted.
    pub fn builder(name: &str) -> ScriptedBuilder {
        ScriptedBuilder {
            model: ScriptedModel {
                info: ClientInfo::new(name, ProviderKind::OpenaiCompatible, false),
                script: Mutex::new(VecDeque::new()),
                otherwise: Otherwise::Echo,
                usage: Billing::Fixed(Usage {
                    input_tokens: 10,
                    output_tokens: 3,
                    ..Usage::default()
                }),
                gate: None,
                delay: Duration::ZERO,
                record: true,
                requests: Mutex::new(Vec::new()),
                calls: Mutex::new(Vec::new()),
                ticks: AtomicUsize::new(0),
                created: Instant::now(),
                extra_deltas: Mutex::new(0),
            },
        }
    }

    pub fn new(name: &str, script: Vec<Script>) -> Arc<Self> {
        Self::builder(name).script(script).build()
    }

    pub fn replies(name: &str, replies: Vec<Message>) -> Arc<Self> {
        Self::new(
            name,
            replies.into_iter().map(|r| Script::Reply(Ok(r))).collect(),
        )
    }

    pub fn echo(name: &str) -> Arc<Self> {
        Self::new(name, vec![])
    }

    pub fn requests(&self) -> Vec<ModelRequest<'static>> {
        self.requests.lock().unwrap().clone()
    }

    /// Every call so far, in the order they came.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// When each call came, counted from the model's creation.
    pub fn call_times(&self) -> Vec<Duration> {
        self.calls()
            .iter()
            .map(|call| call.at - self.created)
            .collect()
    }

    /// The most calls that were ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        let calls = self.calls();
        calls
            .iter()
            .map(|call| calls.iter().filter(|other| other.overlaps(call)).count())
            .max()
            .unwrap_or(0)
    }

    /// Script steps not taken yet.
    pub fn left(&self) -> usize {
        self.script.lock().unwrap().len()
    }

    fn tick(&self) -> usize {
        self.ticks.fetch_add(1, Ordering::SeqCst)
    }

    /// The answer to `request` once the script is used up.
    fn otherwise(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        let reply = match &self.otherwise {
            Otherwise::Echo => {
                Message::assistant(format!("re: {}", last_user_text(&request.messages)))
            }
            Otherwise::Answer(answer) => answer(request)?,
            Otherwise::Hang(text) => return Ok(hang(text.clone())),
            Otherwise::Refuse => {
                return Err(ModelError::Config {
                    message: format!("{}: the script has no step left", self.info.provider),
                });
            }
        };
        Ok(self.answer(reply, request))
    }

    fn answer(&self, reply: Message, request: &ModelRequest) -> ModelStream {
        let extra = *self.extra_deltas.lock().unwrap();
        let mut events: Vec<Result<StreamEvent, ModelError>> = (0..extra)
            .map(|i| Ok(StreamEvent::TextDelta(format!("{i} "))))
            .collect();
        let text = reply.text();
        if !text.is_empty() {
            events.push(Ok(StreamEvent::TextDelta(text)));
        }
        let usage = match &self.usage {
            Billing::Fixed(usage) => *usage,
            Billing::By(bill) => bill(request, &reply),
        };
        let mut done = completed(reply, request.model.to_string());
        if let StreamEvent::Completed(response) = &mut done {
            response.usage = usage;
        }
        events.push(Ok(done));
        Box::pin(futures::stream::iter(events))
    }
}

fn hang(text: String) -> ModelStream {
    let first = futures::stream::iter(vec![Ok(StreamEvent::TextDelta(text))]);
    Box::pin(futures::StreamExt::chain(first, futures::stream::pending()))
}

/// The text of the last user message, its text blocks joined by spaces.
pub fn last_user_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The stream's last event for `message`: its stop reason (tool use when
/// it asks for a tool), 10 tokens in and 3 out.
pub fn completed(message: Message, model: String) -> StreamEvent {
    let stop_reason = if message.tool_uses().next().is_some() {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    StreamEvent::Completed(ModelResponse {
        message,
        stop_reason,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 3,
            ..Usage::default()
        },
        model,
    })
}

#[async_trait]
impl ModelClient for ScriptedModel {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let index = self.record.then(|| {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Call {
                text: last_user_text(&request.messages),
                at: Instant::now(),
                started: self.tick(),
                ended: None,
            });
            self.requests
                .lock()
                .unwrap()
                .push(request.clone().into_owned());
            calls.len() - 1
        });
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("the gate stays open").forget();
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let next = self.script.lock().unwrap().pop_front();
        let delta = |text: String| Ok(StreamEvent::TextDelta(text));
        let stream = match next {
            Some(Script::Reply(reply)) => reply.map(|reply| self.answer(reply, &request)),
            Some(Script::Hang(text)) => Ok(hang(text)),
            Some(Script::Break(text, error)) => {
                let mut events = Vec::new();
                if !text.is_empty() {
                    events.push(delta(text));
                }
                events.push(Err(error));
                Ok(Box::pin(futures::stream::iter(events)) as ModelStream)
            }
            Some(Script::Cut(text)) => {
                Ok(Box::pin(futures::stream::iter(vec![delta(text)])) as ModelStream)
            }
            None => self.otherwise(&request),
        };
        if let Some(index) = index {
            self.calls.lock().unwrap()[index].ended = Some(self.tick());
        }
        stream
    }
}

/// An assistant message that calls `shell.exec` with `command`.
pub fn tool_use(id: &str, command: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "shell.exec".into(),
            input: json!({"command": command}),
        }],
    }
}
