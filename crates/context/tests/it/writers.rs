//! Compaction among other writers: messages appended while it runs, the
//! memory flush, cancellation, and compacting again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flynn_context::{CompactionError, MemoryFlush, SUMMARY_PREFIX, is_summary};
use flynn_protocol::{Message, SessionKey};
use flynn_sessions::Conversations;
use tokio_util::sync::CancellationToken;

use crate::{
    HUGE, Scripted, Step, TestStore, body, compact, compactor, history, key, settings, store_with,
    summary_message, turn,
};

#[tokio::test]
async fn messages_appended_while_summarising_stay_after_the_summary() {
    let all: Vec<Message> = (0..6).flat_map(|n| turn(n, 1, 40)).collect();
    let store = store_with(&all).await;
    let late = vec![
        Message::user("a message that arrived meanwhile"),
        Message::assistant("and its answer"),
    ];
    let summariser = Scripted::new(
        100_000,
        vec![Step::Append(
            store.clone(),
            late.clone(),
            "what happened".into(),
        )],
    );
    let report = compact(&compactor(settings(2), summariser), &store, HUGE)
        .await
        .unwrap();
    assert_eq!(report.replaced, 16);
    assert_eq!(
        history(&store).await,
        [
            vec![summary_message(16, "what happened")],
            all[16..].to_vec(),
            late
        ]
        .concat()
    );
}

/// What a flush was told (messages, summary) and what the store held.
type Flushed = (Vec<Message>, String, Vec<Message>);

/// Records what it is told, and what the store held at that moment.
struct Recorder {
    store: Arc<TestStore>,
    fail: bool,
    seen: Mutex<Vec<Flushed>>,
}

#[async_trait]
impl MemoryFlush for Recorder {
    async fn flush(
        &self,
        session: &SessionKey,
        messages: &[Message],
        summary: &str,
    ) -> Result<(), String> {
        let stored: Vec<Message> = self
            .store
            .history(session)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.message)
            .collect();
        self.seen
            .lock()
            .unwrap()
            .push((messages.to_vec(), summary.to_owned(), stored));
        if self.fail {
            Err("the memory index is locked".into())
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn the_memory_flush_sees_the_compacted_messages_before_they_go() {
    for fail in [false, true] {
        let all: Vec<Message> = (0..6).flat_map(|n| turn(n, 1, 40)).collect();
        let store = store_with(&all).await;
        let recorder = Arc::new(Recorder {
            store: store.clone(),
            fail,
            seen: Mutex::new(Vec::new()),
        });
        let compactor =
            compactor(settings(2), Scripted::new(100_000, vec![])).with_flush(recorder.clone());
        let report = compact(&compactor, &store, HUGE).await.unwrap();
        assert_eq!(report.replaced, 16);
        let seen = recorder.seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![(all[..16].to_vec(), "summary 1".to_owned(), all.clone())],
            "fail: {fail}"
        );
        // A failing flush does not stop compaction.
        assert_eq!(history(&store).await[0], summary_message(16, "summary 1"));
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_while_summarising_leaves_the_history_unchanged() {
    let all: Vec<Message> = (0..6).flat_map(|n| turn(n, 1, 40)).collect();
    let store = store_with(&all).await;
    let cancel = CancellationToken::new();
    let summariser = Scripted::new(100_000, vec![Step::Cancel(cancel.clone())]);
    let compactor = compactor(settings(2), summariser.clone());
    let started = tokio::time::Instant::now();
    let outcome = compactor
        .compact(&*store, &key(), HUGE, true, &cancel)
        .await;
    assert!(
        matches!(outcome, Err(CompactionError::Cancelled)),
        "{outcome:?}"
    );
    // At once, not when the summariser's timeout ran out.
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(summariser.calls().len(), 1);
    assert_eq!(history(&store).await, all);
    // A token cancelled before the start stops it before it reads anything.
    let outcome = compactor
        .compact(&*store, &key(), HUGE, true, &cancel)
        .await;
    assert!(matches!(outcome, Err(CompactionError::Cancelled)));
    assert_eq!(summariser.calls().len(), 1);
    assert_eq!(history(&store).await, all);
}

#[tokio::test]
async fn compacting_twice_folds_the_first_summary_into_the_second() {
    let first: Vec<Message> = (0..6).flat_map(|n| turn(n, 1, 40)).collect();
    let store = store_with(&first).await;
    let summariser = Scripted::new(
        100_000,
        vec![
            Step::Answer("The user asked six questions.".into()),
            Step::Answer("The user asked ten questions.".into()),
        ],
    );
    let compactor = compactor(settings(2), summariser.clone());
    assert_eq!(
        compact(&compactor, &store, HUGE).await.unwrap().replaced,
        16
    );
    let more: Vec<Message> = (6..10).flat_map(|n| turn(n, 1, 40)).collect();
    store.append(&key(), &more).await.unwrap();
    // The first summary, turns 4 and 5 and the four new turns: the summary
    // and turns 4 to 7 go.
    let report = compact(&compactor, &store, HUGE).await.unwrap();
    assert_eq!(report.replaced, 1 + 16);

    let after = history(&store).await;
    let expected_rest: Vec<Message> = first[16..].iter().chain(&more).cloned().collect();
    assert_eq!(after[1..], expected_rest[16..]);
    // 16 messages before, 16 more now: one summary of 32, one prefix.
    assert_eq!(
        after[0],
        summary_message(32, "The user asked ten questions.")
    );
    assert_eq!(after.iter().filter(|m| is_summary(m)).count(), 1);
    assert_eq!(after[0].text().matches(SUMMARY_PREFIX).count(), 1);
    assert_eq!(body(&after[0]), "The user asked ten questions.");

    // The second call got the first summary as the summary so far, and
    // then only the new messages.
    let calls = summariser.calls();
    assert_eq!(calls.len(), 2);
    let second = &calls[1].transcript;
    assert!(
        second.starts_with("Summary so far:\nThe user asked six questions.\n\nuser: question 4"),
        "{second}"
    );
    assert!(!second.contains(SUMMARY_PREFIX), "{second}");
    assert!(!second.contains("question 3"), "{second}");

    // Right after, only the summary is older than the kept turns: nothing
    // to do, and the summariser is not asked to summarise its own summary.
    assert_eq!(compact(&compactor, &store, HUGE).await, None);
    assert_eq!(summariser.calls().len(), 2);
    assert_eq!(history(&store).await, after);
}
