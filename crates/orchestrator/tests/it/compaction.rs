//! Compaction as turns run it: at the threshold, on the fast tier, after
//! a context overflow, with `/compact`, and over a very long conversation.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use flynn_context::{COMPACTION_PROMPT, MemoryFlush, SUMMARY_PREFIX, is_summary};
use flynn_models::{Error as ModelError, Estimate, TokenCounter};
use flynn_orchestrator::AgentEvent;
use flynn_protocol::config::TiersConfig;
use flynn_protocol::{Message, Purpose, SessionKey, Tier};
use flynn_sessions::UsageLog;

use crate::{Harness, Script, ScriptedModel, Setup, key, last_user_text, tiers};

/// Default `m/one` with a `window`-token context window, fast `f/cheap`.
fn windowed(window: u32) -> Setup {
    let mut models = tiers(&["m/one"]);
    models.tiers = TiersConfig {
        fast: vec!["f/cheap".parse().unwrap()],
        ..models.tiers
    };
    models.context_windows.insert("m/one".into(), window);
    Setup {
        models,
        ..Setup::default()
    }
}

/// About `tokens` tokens of text (the estimate is four bytes a token).
fn words(tokens: usize, tag: &str) -> String {
    let mut text = format!("{tag} ");
    while text.len() < tokens * 4 {
        text.push_str("lorem ");
    }
    text
}

fn compactions(events: &[AgentEvent]) -> Vec<(u64, bool)> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::Compaction {
                replaced, fallback, ..
            } => Some((*replaced, *fallback)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_turn_compacts_once_the_prompt_reaches_the_threshold_and_not_before() {
    // A 4,000-token window: 80% is 3,200. Each exchange is about 400
    // tokens (a 300-token message, and an echo of it).
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::new("f", vec![]);
    let h = Harness::new(vec![main.clone(), fast.clone()], windowed(4_000)).await;
    let k = key("cli:long");
    let mut first_compaction = None;
    for i in 0..12 {
        let (outcome, events) = h.send(&k, &words(300, &format!("m{i}"))).await;
        outcome.unwrap();
        let request = main.requests().pop().unwrap();
        let tokens =
            Estimate.count_request(request.system.as_deref(), &request.messages, &request.tools);
        assert!(
            tokens < 3_200,
            "turn {i} sent {tokens} tokens, over the threshold"
        );
        let compacted = events.iter().find_map(|event| match event {
            AgentEvent::Compaction { tokens_before, .. } => Some(*tokens_before),
            _ => None,
        });
        // Compacted when the prompt reached 80% of 4,000 tokens, and not
        // before (every request above stayed under it).
        if let (Some(before), None) = (compacted, first_compaction) {
            assert!(
                before >= 3_200,
                "compacted at {before} tokens, below the threshold"
            );
            first_compaction = Some(i);
        }
    }
    assert!(first_compaction.is_some(), "compaction happened");
    // The summary came from the fast tier, with the compaction prompt.
    let asked = fast.requests();
    assert!(!asked.is_empty());
    assert_eq!(asked[0].system.as_deref(), Some(COMPACTION_PROMPT));
    let history = h.history(&k).await;
    assert!(is_summary(&history[0]), "{:?}", history[0]);
    assert_eq!(history.iter().filter(|m| is_summary(m)).count(), 1);
    // The newest turn is whole: the message as sent, then its answer.
    let n = history.len();
    assert_eq!(history[n - 2], Message::user(words(300, "m11")));
    assert!(
        history[n - 1].text().starts_with("re: "),
        "{}",
        history[n - 1].text()
    );
    let usage = h.store.usage_by_purpose(Some(&k)).await.unwrap();
    assert!(
        usage
            .iter()
            .any(|l| l.tier == Tier::Fast && l.purpose == Purpose::Compaction)
    );
}

#[tokio::test]
async fn a_summariser_failure_still_compacts_with_an_extractive_summary() {
    let main = ScriptedModel::echo("m");
    let failures: Vec<Script> = (0..20)
        .map(|_| {
            Script::Reply(Err(ModelError::Server {
                provider: "f".into(),
                status: 500,
                message: "down".into(),
            }))
        })
        .collect();
    let fast = ScriptedModel::new("f", failures);
    let mut setup = windowed(4_000);
    setup.models.retry.max_retries = 0;
    let h = Harness::new(vec![main.clone(), fast.clone()], setup).await;
    let k = key("cli:long");
    let mut seen = Vec::new();
    for i in 0..12 {
        let (outcome, events) = h.send(&k, &words(300, &format!("m{i}"))).await;
        outcome.unwrap();
        seen.extend(compactions(&events));
    }
    assert!(!seen.is_empty(), "compaction happened");
    assert!(seen.iter().all(|(_, fallback)| *fallback), "{seen:?}");
    let history = h.history(&k).await;
    assert!(history[0].text().starts_with(SUMMARY_PREFIX));
    let summary = history[0].text();
    // The newest compacted lines are kept word for word, and a summary of
    // a summary does not nest.
    assert!(summary.contains("\n- user: m"), "{summary}");
    assert!(summary.contains("\n- assistant: re: m"), "{summary}");
    assert!(summary.contains("Summary so far: "), "{summary}");
    assert!(
        !summary.contains("Summary so far: Summary so far:"),
        "{summary}"
    );
}

#[tokio::test]
async fn a_context_overflow_compacts_and_retries_once() {
    // The server's window is smaller than Flynn thinks (no window is
    // configured, so the table's default is used): it refuses the long
    // prompt once; after compaction the retry goes through.
    let overflow = ModelError::ContextOverflow {
        provider: "m".into(),
        message: "prompt is too long".into(),
    };
    let mut script: Vec<Script> = (0..6)
        .map(|i| Script::Reply(Ok(Message::assistant(format!("answer {i}")))))
        .collect();
    script.push(Script::Reply(Err(overflow)));
    script.push(Script::Reply(Ok(Message::assistant("after compaction"))));
    let main = ScriptedModel::new("m", script);
    let fast = ScriptedModel::replies("f", vec![Message::assistant("the user sent six messages")]);
    let mut setup = windowed(4_000);
    setup.models.context_windows.clear();
    let h = Harness::new(vec![main.clone(), fast.clone()], setup).await;
    let k = key("cli:o");
    for i in 0..6 {
        h.send(&k, &format!("message {i}")).await.0.unwrap();
    }
    let (outcome, events) = h.send(&k, "message 6").await;
    assert_eq!(outcome.unwrap().reply, "after compaction");
    assert_eq!(compactions(&events).len(), 1, "{events:?}");
    let retried = main.requests().pop().unwrap();
    assert!(is_summary(&retried.messages[0]));
    assert!(
        retried.messages[0]
            .text()
            .contains("the user sent six messages")
    );
}

#[tokio::test]
async fn a_second_overflow_after_compaction_fails_the_turn() {
    let overflow = || {
        Script::Reply(Err(ModelError::ContextOverflow {
            provider: "m".into(),
            message: "prompt is too long".into(),
        }))
    };
    let mut script: Vec<Script> = (0..6)
        .map(|i| Script::Reply(Ok(Message::assistant(format!("answer {i}")))))
        .collect();
    script.push(overflow());
    script.push(overflow());
    let main = ScriptedModel::new("m", script);
    let fast = ScriptedModel::echo("f");
    let h = Harness::new(vec![main.clone(), fast], windowed(100_000)).await;
    let k = key("cli:o");
    for i in 0..6 {
        h.send(&k, &format!("message {i}")).await.0.unwrap();
    }
    let (outcome, _) = h.send(&k, "message 6").await;
    let error = outcome.unwrap_err();
    assert!(error.to_string().contains("prompt is too long"), "{error}");
    assert_eq!(main.requests().len(), 8, "one retry, not more");
}

#[tokio::test]
async fn slash_compact_compacts_now_and_says_what_it_did() {
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::replies("f", vec![Message::assistant("short summary")]);
    let h = Harness::new(vec![main, fast], windowed(100_000)).await;
    let k = key("cli:c");
    assert_eq!(
        h.command(&k, "/compact").await,
        "Nothing to compact: the conversation has no more than the last 4 turns, which are always kept."
    );
    for i in 0..6 {
        h.send(&k, &format!("message {i}")).await.0.unwrap();
    }
    let reply = h.command(&k, "/compact").await;
    assert!(
        reply.starts_with("Compacted 4 older messages into a summary: about "),
        "{reply}"
    );
    let history = h.history(&k).await;
    assert_eq!(history.len(), 1 + 8, "the summary and the last four turns");
    assert!(history[0].text().ends_with("short summary"));
    assert_eq!(history[1], Message::user("message 2"));
}

/// Records what the memory flush was handed.
#[derive(Default)]
struct Flushed(Mutex<Vec<(SessionKey, usize, String)>>);

#[async_trait]
impl MemoryFlush for Flushed {
    async fn flush(
        &self,
        session: &SessionKey,
        messages: &[Message],
        summary: &str,
    ) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push((session.clone(), messages.len(), summary.to_owned()));
        Ok(())
    }
}

#[tokio::test]
async fn the_memory_flush_gets_the_messages_before_they_are_replaced() {
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::replies("f", vec![Message::assistant("short summary")]);
    let flushed = Arc::new(Flushed::default());
    let mut setup = windowed(100_000);
    setup.memory_flush = Some(flushed.clone());
    let h = Harness::new(vec![main, fast], setup).await;
    let k = key("cli:f");
    for i in 0..6 {
        h.send(&k, &format!("message {i}")).await.0.unwrap();
    }
    h.command(&k, "/compact").await;
    let calls = flushed.0.lock().unwrap().clone();
    assert_eq!(calls, vec![(k, 4, "short summary".to_owned())]);
}

/// A model with an 8,192-token window that refuses anything larger, as a
/// server does, and answers with about 100 tokens; `largest` keeps the
/// largest request it was sent, in tokens.
fn eight_k(largest: Arc<Mutex<usize>>) -> Arc<ScriptedModel> {
    ScriptedModel::builder("m")
        .answer(move |request| {
            let tokens = Estimate.count_request(
                request.system.as_deref(),
                &request.messages,
                &request.tools,
            );
            {
                let mut largest = largest.lock().unwrap();
                *largest = (*largest).max(tokens);
            }
            if tokens > 8_192 {
                return Err(ModelError::ContextOverflow {
                    provider: "m".to_owned(),
                    message: format!("{tokens} tokens is more than the 8192-token window"),
                });
            }
            let asked = last_user_text(&request.messages);
            let reply = if request.system.as_deref() == Some(COMPACTION_PROMPT) {
                // A summariser that keeps it short.
                format!("Summary: {}", asked.chars().take(400).collect::<String>())
            } else {
                words(
                    100,
                    &format!("re: {}", asked.split(' ').next().unwrap_or_default()),
                )
            };
            Ok(Message::assistant(reply))
        })
        .build()
}

#[tokio::test]
async fn five_hundred_turns_against_an_8k_window_never_overflow() {
    let largest = Arc::new(Mutex::new(0));
    let model = eight_k(largest.clone());
    let mut setup = windowed(8_192);
    // One model for both tiers, as a single local model would be.
    setup.models.tiers.fast = vec!["m/one".parse().unwrap()];
    let h = Harness::new(vec![model], setup).await;
    let k = key("cli:days");
    let mut compactions_seen = 0;
    for i in 0..500 {
        let (outcome, events) = h.send(&k, &words(100, &format!("m{i}"))).await;
        if let Err(error) = outcome {
            panic!("turn {i} failed: {error}");
        }
        compactions_seen += compactions(&events).len();
    }
    assert!(compactions_seen >= 10, "{compactions_seen} compactions");
    assert!(*largest.lock().unwrap() <= 8_192);
    let history = h.history(&k).await;
    assert_eq!(history.iter().filter(|m| is_summary(m)).count(), 1);
}
