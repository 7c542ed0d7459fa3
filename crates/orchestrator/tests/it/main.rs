//! The agent loop against a scripted in-process model, real tools and a
//! real SQLite store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flynn_models::{
    ClientInfo, Error as ModelError, ModelClient, ModelRequest, ModelResponse, ModelRouter,
    ModelStream, StopReason, StreamEvent,
};
use flynn_orchestrator::{Agent, AgentEvent, AgentSettings, Error, TurnRequest};
use flynn_protocol::config::{ModelsConfig, ProviderKind, TiersConfig};
use flynn_protocol::{ContentBlock, Message, Role, RunState, SessionKey, ToolCallSummary, Usage};
use flynn_sessions::{SessionStore, SqliteStore};
use flynn_tools::ToolExecutor;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A model that answers from a script and records what it was asked.
struct Scripted {
    info: ClientInfo,
    replies: Mutex<VecDeque<Result<Message, ModelError>>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Scripted {
    fn new(name: &str, replies: Vec<Result<Message, ModelError>>) -> Arc<Self> {
        Arc::new(Scripted {
            info: ClientInfo::new(name, ProviderKind::OpenaiCompatible, false),
            replies: Mutex::new(replies.into()),
            requests: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl ModelClient for Scripted {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let model = request.model.clone();
        self.requests.lock().unwrap().push(request);
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Ok(Message::assistant("script exhausted")))?;
        let stop_reason = if reply.tool_uses().next().is_some() {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        };
        let mut events = vec![];
        let text = reply.text();
        if !text.is_empty() {
            events.push(Ok(StreamEvent::TextDelta(text)));
        }
        events.push(Ok(StreamEvent::Completed(ModelResponse {
            message: reply,
            stop_reason,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 3,
                ..Usage::default()
            },
            model,
        })));
        Ok(Box::pin(futures::stream::iter(events)))
    }
}

fn tool_use(id: &str, command: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "shell.exec".into(),
            input: json!({"command": command}),
        }],
    }
}

fn tiers(default: &[&str]) -> ModelsConfig {
    ModelsConfig {
        tiers: TiersConfig {
            default: default.iter().map(|m| m.parse().unwrap()).collect(),
            ..TiersConfig::default()
        },
        ..ModelsConfig::default()
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    agent: Agent,
    store: Arc<SqliteStore>,
}

async fn harness(
    clients: Vec<Arc<Scripted>>,
    models: ModelsConfig,
    max_iterations: u32,
) -> Harness {
    harness_with(clients, models, |s| s.max_iterations = max_iterations).await
}

async fn harness_with(
    clients: Vec<Arc<Scripted>>,
    models: ModelsConfig,
    tweak: impl FnOnce(&mut AgentSettings),
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let clients: HashMap<String, Arc<dyn ModelClient>> = clients
        .into_iter()
        .map(|c| (c.info.provider.clone(), c as Arc<dyn ModelClient>))
        .collect();
    let router = Arc::new(ModelRouter::new(clients, models));
    let registry = flynn_tools::builtin::registry(&Default::default()).unwrap();
    let executor = ToolExecutor::new(Arc::new(registry), 50 * 1024);
    let mut settings = AgentSettings {
        workspace: dir.path().to_path_buf(),
        ..AgentSettings::default()
    };
    tweak(&mut settings);
    let agent = Agent::new(router, executor, store.clone(), settings);
    Harness {
        _dir: dir,
        agent,
        store,
    }
}

fn key() -> SessionKey {
    "cli:test".parse().unwrap()
}

async fn run(
    h: &Harness,
    text: &str,
) -> (Result<flynn_protocol::TurnOutcome, Error>, Vec<AgentEvent>) {
    let mut events = Vec::new();
    let result = h
        .agent
        .run_turn(
            TurnRequest::text(key(), text),
            CancellationToken::new(),
            &mut |e| events.push(e),
        )
        .await;
    (result, events)
}

#[tokio::test]
async fn a_plain_answer_streams_and_is_stored() {
    let model = Scripted::new("m", vec![Ok(Message::assistant("Hello!"))]);
    let h = harness(vec![model.clone()], tiers(&["m/one"]), 10).await;
    let (result, events) = run(&h, "hi").await;
    let outcome = result.unwrap();
    assert_eq!(outcome.reply, "Hello!");
    assert_eq!(
        (outcome.provider.as_str(), outcome.model.as_str()),
        ("m", "one")
    );
    assert_eq!(
        events,
        vec![
            AgentEvent::RunState {
                state: RunState::Start
            },
            AgentEvent::ContentDelta {
                text: "Hello!".into()
            },
            AgentEvent::Done {
                outcome: outcome.clone()
            },
            AgentEvent::RunState {
                state: RunState::Complete
            },
        ]
    );
    assert_eq!(
        h.store.history(&key()).await.unwrap(),
        vec![Message::user("hi"), Message::assistant("Hello!")]
    );
    let request = &model.requests.lock().unwrap()[0];
    assert_eq!(request.model, "one");
    assert_eq!(request.messages, vec![Message::user("hi")]);
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["file.read", "shell.exec"]);
}

#[tokio::test]
async fn tool_calls_run_and_their_results_go_back_to_the_model() {
    let model = Scripted::new(
        "m",
        vec![
            Ok(tool_use("t1", "echo hi")),
            Ok(Message::assistant("It said hi.")),
        ],
    );
    let h = harness(vec![model.clone()], tiers(&["m/one"]), 10).await;
    let (result, events) = run(&h, "run echo").await;
    let outcome = result.unwrap();
    assert_eq!(outcome.reply, "It said hi.");
    assert_eq!(
        outcome.tool_calls,
        vec![ToolCallSummary {
            name: "shell.exec".into(),
            ok: true
        }]
    );
    assert_eq!(outcome.usage.input_tokens, 20);
    assert!(events.contains(&AgentEvent::ToolEnd {
        id: "t1".into(),
        name: "shell.exec".into(),
        ok: true,
        output: "hi\n".into(),
    }));
    let result_message = Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "t1".into(),
            content: "hi\n".into(),
            is_error: false,
        }],
    };
    let expected = vec![
        Message::user("run echo"),
        tool_use("t1", "echo hi"),
        result_message,
        Message::assistant("It said hi."),
    ];
    assert_eq!(h.store.history(&key()).await.unwrap(), expected);
    assert_eq!(model.requests.lock().unwrap()[1].messages, expected[..3]);
}

#[tokio::test]
async fn max_iterations_ends_with_a_partial_answer_and_a_warning() {
    let model = Scripted::new(
        "m",
        vec![
            Ok(tool_use("t1", "true")),
            Ok(tool_use("t2", "true")),
            Ok(tool_use("t3", "true")),
        ],
    );
    let h = harness(vec![model.clone()], tiers(&["m/one"]), 2).await;
    let (result, events) = run(&h, "loop").await;
    let outcome = result.unwrap();
    let warning = "stopped after 2 model calls (agents.max_iterations) while the model was still using tools; the answer may be incomplete";
    assert_eq!(outcome.warning.as_deref(), Some(warning));
    assert_eq!(outcome.tool_calls.len(), 2);
    assert!(events.contains(&AgentEvent::Warning {
        message: warning.into()
    }));
    assert_eq!(model.requests.lock().unwrap().len(), 2);
    // Every tool call in the history has its result.
    assert_eq!(h.store.history(&key()).await.unwrap().len(), 5);
}

#[tokio::test]
async fn a_failing_model_falls_back_and_says_so() {
    // A 500 is retried (twice by default, here after 1 ms) before the
    // router moves on.
    let boom = || {
        Err(ModelError::Server {
            provider: "a".into(),
            status: 500,
            message: "boom".into(),
        })
    };
    let broken = Scripted::new("a", vec![boom(), boom(), boom()]);
    let good = Scripted::new("b", vec![Ok(Message::assistant("from b"))]);
    let mut models = tiers(&["a/x", "b/y"]);
    models.retry.initial_backoff_ms = 1;
    models.retry.max_backoff_ms = 1;
    let h = harness(vec![broken, good], models, 10).await;
    let (result, events) = run(&h, "hi").await;
    let outcome = result.unwrap();
    assert_eq!(
        (outcome.provider.as_str(), outcome.reply.as_str()),
        ("b", "from b")
    );
    assert!(events.contains(&AgentEvent::Warning {
        message: "a/x failed, fell back to b/y: a: server error (HTTP 500): boom".into()
    }));
}

#[tokio::test]
async fn provider_errors_end_the_turn_with_an_error_event_and_keep_the_message() {
    let broken = Scripted::new(
        "a",
        vec![Err(ModelError::Auth {
            provider: "a".into(),
            status: 401,
            message: "bad key".into(),
            env: Some("OPENAI_API_KEY"),
        })],
    );
    let h = harness(vec![broken], tiers(&["a/x"]), 10).await;
    let (result, events) = run(&h, "hi").await;
    assert!(matches!(result, Err(Error::Model(ModelError::Auth { .. }))));
    assert_eq!(
        events.last(),
        Some(&AgentEvent::RunState {
            state: RunState::Error
        })
    );
    assert_eq!(
        h.store.history(&key()).await.unwrap(),
        vec![Message::user("hi")]
    );
}

#[tokio::test]
async fn cancelling_during_a_tool_stops_quickly_and_pairs_every_call() {
    let model = Scripted::new("m", vec![Ok(tool_use("t1", "sleep 30"))]);
    let h = harness(vec![model], tiers(&["m/one"]), 10).await;
    let cancel = CancellationToken::new();
    let mut events = Vec::new();
    let started = Instant::now();
    let trigger = cancel.clone();
    let result = h
        .agent
        .run_turn(TurnRequest::text(key(), "sleep"), cancel, &mut |e| {
            if matches!(e, AgentEvent::ToolStart { .. }) {
                trigger.cancel();
            }
            events.push(e);
        })
        .await;
    assert!(matches!(result, Err(Error::Cancelled)));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        events.last(),
        Some(&AgentEvent::RunState {
            state: RunState::Cancelled
        })
    );
    let history = h.store.history(&key()).await.unwrap();
    assert_eq!(
        history.last(),
        Some(&Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "shell.exec was cancelled".into(),
                is_error: true,
            }],
        })
    );
}

#[tokio::test]
async fn every_model_call_is_recorded_with_its_tier_and_cost() {
    use flynn_models::PriceTable;
    use flynn_protocol::Tier;
    use flynn_protocol::config::Price;
    use flynn_sessions::UsageTotal;

    let model = Scripted::new(
        "m",
        vec![Ok(tool_use("t1", "true")), Ok(Message::assistant("done"))],
    );
    let mut prices = std::collections::BTreeMap::new();
    // $1 per million input tokens, $2 per million output tokens.
    prices.insert(
        "m/one".to_owned(),
        Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
        },
    );
    let h = harness_with(vec![model], tiers(&["m/one"]), |s| {
        s.prices = PriceTable::new(&Default::default(), &prices);
    })
    .await;
    let (result, _) = run(&h, "go").await;
    let outcome = result.unwrap();
    // Two calls of 10 input and 3 output tokens each.
    let expected_cost = 2.0 * (10.0 * 1.0 + 3.0 * 2.0) / 1_000_000.0;
    assert_eq!(outcome.cost_usd, Some(expected_cost));
    assert_eq!(
        h.store.usage_by_tier(Some(&key())).await.unwrap(),
        vec![(
            Tier::Default,
            UsageTotal {
                calls: 2,
                usage: Usage {
                    input_tokens: 20,
                    output_tokens: 6,
                    ..Usage::default()
                },
                cost_usd: expected_cost,
                unpriced_calls: 0,
            }
        )]
    );
}
