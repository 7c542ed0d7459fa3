//! Histories bigger than the summariser's window are summarised in
//! chunks, each given the summary so far.

use flynn_context::{Budget, COMPACTION_PROMPT, CompactionSettings};
use flynn_models::{Estimate, TokenCounter};
use flynn_protocol::Message;

use crate::{
    Call, HUGE, Scripted, Step, compact, compactor, history, settings, store_with, summary_message,
    turn,
};

/// Whether a call's system prompt, transcript and asked-for answer fit the
/// window.
fn fits(call: &Call, window: usize) -> bool {
    Estimate.count_text(&call.system)
        + Estimate.count_text(&call.transcript)
        + call.max_tokens as usize
        <= window
}

#[tokio::test]
async fn a_history_bigger_than_the_summariser_window_is_summarised_in_chunks() {
    // 40 turns of ~330 tokens: ~13,000 tokens to summarise through a
    // 4,000-token window, with a 500-token summary.
    let all: Vec<Message> = (0..44).flat_map(|n| turn(n, 1, 384)).collect();
    let store = store_with(&all).await;
    let summariser = Scripted::new(4_000, vec![]);
    let compactor = compactor(
        CompactionSettings {
            summary_max_tokens: 500,
            ..settings(4)
        },
        summariser.clone(),
    );
    let report = compact(&compactor, &store, HUGE).await.unwrap();
    let calls = summariser.calls();
    assert!(calls.len() >= 4, "{} calls", calls.len());
    assert_eq!(report.chunks, calls.len());
    assert_eq!((report.fallback, report.fallback_reason), (false, None));
    assert_eq!(
        report.summariser_tokens,
        calls
            .iter()
            .map(|c| Estimate.count_text(&c.system) + Estimate.count_text(&c.transcript))
            .sum::<usize>()
    );
    for (i, call) in calls.iter().enumerate() {
        assert!(fits(call, 4_000), "call {i} does not fit");
        assert_eq!(
            (call.system.as_str(), call.max_tokens),
            (COMPACTION_PROMPT, 500)
        );
        // A rolling summary: each chunk after the first starts with the
        // previous answer.
        if i > 0 {
            assert!(
                call.transcript
                    .starts_with(&format!("Summary so far:\nsummary {i}\n\n")),
                "call {i}: {}",
                &call.transcript[..80]
            );
        } else {
            assert!(call.transcript.starts_with("user: question 0"));
        }
    }
    // Every compacted message went to exactly one chunk, in order.
    let questions: Vec<usize> = calls
        .iter()
        .flat_map(|c| {
            c.transcript
                .lines()
                .filter_map(|l| l.strip_prefix("user: question "))
                .map(|l| l.split(' ').next().unwrap().parse::<usize>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(questions, (0..40).collect::<Vec<_>>());
    assert_eq!(report.replaced, 160);
    assert_eq!(
        history(&store).await[0],
        summary_message(160, &format!("summary {}", calls.len()))
    );
}

#[tokio::test]
async fn a_message_bigger_than_a_chunk_is_clipped_to_fit() {
    let mut all = vec![
        Message::user(format!("paste: {}", "0123456789".repeat(4_000))),
        Message::assistant("That is a lot of digits."),
    ];
    all.extend((0..4).flat_map(|n| turn(n, 1, 40)));
    let store = store_with(&all).await;
    let summariser = Scripted::new(2_000, vec![]);
    let compactor = compactor(
        CompactionSettings {
            summary_max_tokens: 200,
            ..settings(4)
        },
        summariser.clone(),
    );
    let report = compact(&compactor, &store, HUGE).await.unwrap();
    let calls = summariser.calls();
    assert_eq!(report.chunks, calls.len());
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| fits(c, 2_000)));
    let first = &calls[0].transcript;
    assert!(first.starts_with("user: paste: 0123456789"), "{first}");
    assert!(first.contains(" characters left out …]"), "{first}");
    assert!(first.ends_with("56789"), "{first}");
    assert_eq!(
        calls[1].transcript,
        "Summary so far:\nsummary 1\n\nassistant: That is a lot of digits."
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_in_one_chunk_stops_calling_for_the_rest() {
    let all: Vec<Message> = (0..44).flat_map(|n| turn(n, 1, 384)).collect();
    let store = store_with(&all).await;
    let summariser = Scripted::new(4_000, vec![Step::Answer("first part".into()), Step::Hang]);
    let compactor = compactor(
        CompactionSettings {
            summary_max_tokens: 500,
            ..settings(4)
        },
        summariser.clone(),
    );
    let report = compact(&compactor, &store, HUGE).await.unwrap();
    assert_eq!(report.chunks, 2);
    assert_eq!(summariser.calls().len(), 2);
    assert!(report.fallback);
    assert_eq!(
        report.fallback_reason.as_deref(),
        Some("the summariser timed out after 60 s")
    );
    let summary = crate::body(&history(&store).await[0]);
    // One extractive summary of everything after the summariser's first
    // part: it starts from that part and ends with the last compacted
    // answer.
    assert!(
        summary.starts_with("Summary so far: first part\n(… "),
        "{summary}"
    );
    assert_eq!(summary.matches("Summary so far").count(), 1, "{summary}");
    assert!(
        summary.ends_with(&format!("- assistant: {}…", &all[159].text()[..300])),
        "{summary}"
    );
    assert!(Estimate.count_text(&summary) <= 500);
}

#[tokio::test]
async fn a_summariser_window_too_small_for_anything_falls_back_without_calling() {
    let all: Vec<Message> = (0..6).flat_map(|n| turn(n, 1, 40)).collect();
    let store = store_with(&all).await;
    let summariser = Scripted::new(1_000, vec![]);
    let budget = Budget {
        window: 100_000,
        overhead: 0,
    };
    let report = compact(&compactor(settings(2), summariser.clone()), &store, budget)
        .await
        .unwrap();
    assert!(summariser.calls().is_empty());
    assert_eq!(
        (report.chunks, report.summariser_tokens, report.fallback),
        (0, 0, true)
    );
    assert_eq!(
        report.fallback_reason.as_deref(),
        Some(
            "the summariser's window of 1000 tokens cannot hold its instructions, a 2048-token summary and some conversation"
        )
    );
    assert_eq!(history(&store).await[1..], all[16..]);
}

#[tokio::test]
async fn failed_chunks_in_a_row_make_one_extractive_summary_for_the_next_call() {
    let all: Vec<Message> = (0..44).flat_map(|n| turn(n, 1, 384)).collect();
    let store = store_with(&all).await;
    let summariser = Scripted::new(
        4_000,
        vec![
            Step::Answer("first part".into()),
            Step::Fail("overloaded".into()),
            Step::Answer(String::new()),
        ],
    );
    let compactor = compactor(
        CompactionSettings {
            summary_max_tokens: 500,
            ..settings(4)
        },
        summariser.clone(),
    );
    let report = compact(&compactor, &store, HUGE).await.unwrap();
    let calls = summariser.calls();
    assert!(calls.len() >= 4, "{} calls", calls.len());
    assert!(calls.iter().all(|c| fits(c, 4_000)));
    assert_eq!(
        report.fallback_reason.as_deref(),
        Some("the summariser failed: overloaded")
    );
    // The third and fourth calls get an extractive summary that starts
    // from the first part, never one nested in another.
    for call in &calls[2..4] {
        assert!(
            call.transcript
                .starts_with("Summary so far:\nSummary so far: first part\n"),
            "{}",
            &call.transcript[..80]
        );
        assert_eq!(call.transcript.matches("Summary so far: ").count(), 1);
    }
    // Each holds the latest question of the chunk before it.
    let last_question = |call: &Call| {
        call.transcript
            .lines()
            .filter_map(|l| l.strip_prefix("user: question "))
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .next_back()
            .unwrap()
    };
    for i in [2, 3] {
        let question = last_question(&calls[i - 1]);
        assert!(
            calls[i]
                .transcript
                .contains(&format!("- user: question {question} ")),
            "call {i}"
        );
    }
    // The summariser recovered: its last answer is the summary.
    assert_eq!(
        history(&store).await[0],
        summary_message(160, &format!("summary {}", calls.len()))
    );
}
