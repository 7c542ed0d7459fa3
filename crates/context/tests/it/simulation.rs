//! A long conversation never outgrows its window when it compacts
//! whenever `should_compact` says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use flynn_context::{Budget, CompactionSettings, Compactor, Summariser, is_summary};
use flynn_models::Estimate;
use flynn_protocol::Message;
use flynn_sessions::Conversations;
use tokio_util::sync::CancellationToken;

use crate::{TestStore, history, history_tokens, key};

/// Answers with a summary of about half the budget, and fails every
/// fifth call, so both real and extractive summaries pile up.
struct Steady {
    calls: AtomicUsize,
}

#[async_trait]
impl Summariser for Steady {
    async fn summarise(&self, _: &str, _: &str, max_tokens: u32) -> Result<String, String> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n.is_multiple_of(5) {
            return Err("overloaded".into());
        }
        Ok(format!(
            "Summary {n}: {}",
            "facts ".repeat(max_tokens as usize / 3)
        ))
    }

    fn window_tokens(&self) -> usize {
        32_000
    }
}

/// About 100 tokens of text (4 bytes a token, 4 of framing).
fn text(who: &str, n: usize) -> String {
    let head = format!("{who} {n}:");
    format!("{head}{}", " word".repeat((384 - head.len()) / 5))
}

#[tokio::test]
async fn five_hundred_turns_stay_within_an_8k_window() {
    let store = Arc::new(TestStore::open().await);
    let summariser = Arc::new(Steady {
        calls: AtomicUsize::new(0),
    });
    let compactor = Compactor::new(CompactionSettings::default(), summariser.clone(), &Estimate);
    let budget = Budget {
        window: 8_192,
        overhead: 500,
    };
    let cancel = CancellationToken::new();
    let (mut compactions, mut fallbacks, mut peak) = (0, 0, 0);
    for n in 0..500 {
        for message in [
            Message::user(text("question", n)),
            Message::assistant(text("answer", n)),
        ] {
            store.append(&key(), &[message]).await.unwrap();
            let prompt = budget.overhead + history_tokens(&store).await;
            assert!(prompt <= budget.window, "turn {n}: {prompt} tokens");
            peak = peak.max(prompt);
            if compactor.should_compact(prompt, budget.window) {
                let report = compactor
                    .compact(&*store, &key(), budget, false, &cancel)
                    .await
                    .unwrap()
                    .unwrap();
                compactions += 1;
                fallbacks += usize::from(report.fallback);
                let after = budget.overhead + history_tokens(&store).await;
                assert_eq!(report.tokens_after, after);
                assert!(
                    after <= compactor.target(budget.window),
                    "turn {n}: {after}"
                );
                let stored = history(&store).await;
                assert!(is_summary(&stored[0]));
                assert_eq!(stored.iter().filter(|m| is_summary(m)).count(), 1);
            }
        }
    }
    // It compacted regularly, with both kinds of summary, and came close
    // to the threshold (6,554 tokens) without passing the window.
    assert!(compactions >= 15, "{compactions} compactions");
    assert!(
        fallbacks >= 1 && fallbacks < compactions,
        "{fallbacks} fallbacks"
    );
    assert!((6_554..=8_192).contains(&peak), "peak {peak}");
    // The last four turns are there, whole.
    let stored = history(&store).await;
    let tail: Vec<Message> = (496..500)
        .flat_map(|n| {
            [
                Message::user(text("question", n)),
                Message::assistant(text("answer", n)),
            ]
        })
        .collect();
    assert_eq!(stored[stored.len() - 8..], tail);
}
