//! Where compaction cuts: the last turns kept whole, never a tool call
//! apart from its result, and the prompt brought under the target.

use flynn_context::{Budget, CompactionSettings};
use flynn_models::{Estimate, TokenCounter};
use flynn_protocol::{ContentBlock, Message, Role};
use tokio_util::sync::CancellationToken;

use crate::{
    HUGE, Scripted, call, compact, compactor, history, history_tokens, key, result, settings,
    store_with, summary_message, turn,
};

#[test]
fn compaction_is_due_at_the_threshold_and_not_a_token_before() {
    let compactor = compactor(CompactionSettings::default(), Scripted::new(0, vec![]));
    assert!(compactor.should_compact(8_000, 10_000));
    assert!(!compactor.should_compact(7_999, 10_000));
    // 80 % of 8,192 is 6,553.6 tokens.
    assert!(compactor.should_compact(6_554, 8_192));
    assert!(!compactor.should_compact(6_553, 8_192));
    let full = crate::compactor(
        CompactionSettings {
            threshold_pct: 100,
            ..CompactionSettings::default()
        },
        Scripted::new(0, vec![]),
    );
    assert!(full.should_compact(8_192, 8_192));
    assert!(!full.should_compact(8_191, 8_192));
}

#[tokio::test]
async fn the_last_turns_are_kept_whole() {
    let mut all: Vec<Message> = (0..5).flat_map(|n| turn(n, 2, 40)).collect();
    // A failed turn left a question without an answer: a same-role run.
    all.push(Message::user("are you there?"));
    all.extend(turn(5, 1, 40));
    all.extend(turn(6, 3, 40));
    let store = store_with(&all).await;
    let summariser = Scripted::new(100_000, vec![]);
    let report = compact(&compactor(settings(3), summariser.clone()), &store, HUGE)
        .await
        .unwrap();
    // Kept: "are you there?", turn 5 and turn 6 (the question is a turn).
    let kept = 1 + 4 + 8;
    assert_eq!(report.replaced, all.len() - kept);
    assert_eq!(
        history(&store).await,
        [
            vec![summary_message(report.replaced, "summary 1")],
            all[all.len() - kept..].to_vec()
        ]
        .concat()
    );
    // The summariser saw every compacted message, and only those.
    let transcript = &summariser.calls()[0].transcript;
    assert!(transcript.starts_with("user: question 0"), "{transcript}");
    assert!(transcript.contains("answer 4"), "{transcript}");
    assert!(!transcript.contains("are you there"), "{transcript}");
    assert_eq!(
        (report.fallback, report.chunks, report.fallback_reason),
        (false, 1, None)
    );
}

/// Whether every tool call in `messages` has its result among them, and
/// every result its call.
fn paired(messages: &[Message]) -> bool {
    let mut calls: Vec<&str> = messages
        .iter()
        .flat_map(|m| m.tool_uses().map(|(id, _, _)| id))
        .collect();
    let mut results: Vec<&str> = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|block| match block {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    calls.sort_unstable();
    results.sort_unstable();
    calls == results
}

#[tokio::test]
async fn a_tool_call_is_never_separated_from_its_result() {
    // Two short turns, then a long one: a question interrupted while a
    // call ran, parallel calls answered together, then twelve calls with
    // big results.
    let mut all: Vec<Message> = (0..2).flat_map(|n| turn(n, 1, 40)).collect();
    all.push(Message::user("collect the logs"));
    all.push(call("w", "sleep 5"));
    all.push(Message::user("hurry up")); // a turn start inside an exchange
    all.push(result("w", "woke", false));
    all.push(Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::text("Reading both."),
            ContentBlock::ToolUse {
                id: "p1".into(),
                name: "file.read".into(),
                input: serde_json::json!({"path": "a.log"}),
            },
            ContentBlock::ToolUse {
                id: "p2".into(),
                name: "file.read".into(),
                input: serde_json::json!({"path": "b.log"}),
            },
        ],
    });
    all.push(Message {
        role: Role::User,
        content: vec![
            ContentBlock::ToolResult {
                tool_use_id: "p1".into(),
                content: "a".repeat(400),
                is_error: false,
            },
            ContentBlock::ToolResult {
                tool_use_id: "p2".into(),
                content: "b".repeat(400),
                is_error: true,
            },
        ],
    });
    for c in 0..12 {
        let id = format!("c{c}");
        all.push(call(&id, &format!("cat part{c}")));
        all.push(result(&id, &"x".repeat(400), false));
    }
    all.push(Message::assistant("The logs are collected."));
    assert!(paired(&all));

    // The last turn starts at "hurry up" (10), inside the exchange of "w"
    // (9 to 11): keeping one turn moves the cut back to the turn before.
    let store = store_with(&all).await;
    let compactor1 = compactor(settings(1), Scripted::new(100_000, vec![]));
    let report = compact(&compactor1, &store, HUGE).await.unwrap();
    assert_eq!(report.replaced, 8);
    assert_eq!(history(&store).await[1..], all[8..]);

    let mut cuts = Vec::new();
    for window in (300..=6_000).step_by(50) {
        let store = store_with(&all).await;
        let compactor = compactor(settings(4), Scripted::new(100_000, vec![]));
        let budget = Budget {
            window,
            overhead: 0,
        };
        let Some(report) = compact(&compactor, &store, budget).await else {
            assert_eq!(history(&store).await, all, "window {window}");
            continue;
        };
        let after = history(&store).await;
        let kept = &after[1..];
        assert_eq!(kept, &all[report.replaced..], "window {window}");
        assert!(paired(kept), "window {window}: {kept:?}");
        assert!(paired(&after), "window {window}");
        // Never between the call "w" (9) and its result (11).
        assert!(
            ![10, 11].contains(&report.replaced),
            "window {window} cut at {}",
            report.replaced
        );
        cuts.push(report.replaced);
    }
    // Large windows keep the last turns (all three: cut nothing but
    // where the turns start); smaller ones cut inside the long turn, down
    // to the last message group.
    assert!(cuts.contains(&all.len().saturating_sub(1)), "{cuts:?}");
    assert!(
        cuts.iter().any(|&cut| cut > 12 && cut < all.len() - 1),
        "{cuts:?}"
    );
    assert!(cuts.windows(2).all(|w| w[0] >= w[1]), "{cuts:?}");
}

#[tokio::test]
async fn after_compaction_the_prompt_is_under_the_target() {
    // 20 turns of three ~100-token messages and a call: 6,750 tokens with
    // the overhead.
    let all: Vec<Message> = (0..20).flat_map(|n| turn(n, 1, 384)).collect();
    let store = store_with(&all).await;
    let budget = Budget {
        window: 8_192,
        overhead: 500,
    };
    let before = budget.overhead + history_tokens(&store).await;
    assert_eq!(before, 6_750);
    let compactor = compactor(CompactionSettings::default(), Scripted::new(32_000, vec![]));
    assert!(compactor.should_compact(before, budget.window));
    let report = compactor
        .compact(&*store, &key(), budget, false, &CancellationToken::new())
        .await
        .unwrap()
        .unwrap();
    let after = budget.overhead + history_tokens(&store).await;
    assert_eq!((report.tokens_before, report.tokens_after), (before, after));
    assert!(after <= compactor.target(budget.window), "{after}");
    assert_eq!(compactor.target(8_192), 3_931);
    // The four kept turns fit, so all four are kept.
    assert_eq!(history(&store).await[1..], all[all.len() - 16..]);
}

#[tokio::test]
async fn kept_turns_too_big_for_the_target_are_cut_at_a_later_safe_point() {
    // Four turns of ~1,000 tokens each for an 8,192 window: keeping all
    // four would be over the target of 3,931.
    let all: Vec<Message> = (0..6).flat_map(|n| turn(n, 4, 400)).collect();
    let store = store_with(&all).await;
    let budget = Budget {
        window: 8_192,
        overhead: 500,
    };
    let compactor = compactor(CompactionSettings::default(), Scripted::new(32_000, vec![]));
    let report = compact(&compactor, &store, budget).await.unwrap();
    let after = history(&store).await;
    assert!(report.tokens_after <= compactor.target(8_192));
    // The cut fell later than the start of the fourth-last turn, where
    // the prompt fits, on a safe point.
    assert!(report.replaced > 2 * 10, "{}", report.replaced);
    assert!(paired(&after));
    // One safe cut earlier (a turn start, or a call after results) would
    // not have fitted.
    let earlier_cut = (1..report.replaced)
        .rev()
        .find(|&i| {
            let message = &all[i];
            let previous = &all[i - 1];
            (message.role == Role::User && !message.text().is_empty())
                || (message.role == Role::Assistant
                    && previous.role == Role::User
                    && previous.text().is_empty())
        })
        .unwrap();
    let reserve = 1_024 + Estimate.count_message(&summary_message(usize::MAX, ""));
    let earlier: usize = all[earlier_cut..]
        .iter()
        .map(|m| Estimate.count_message(m))
        .sum();
    assert!(budget.overhead + reserve + earlier > compactor.target(8_192));
}

#[tokio::test]
async fn with_nothing_older_than_the_kept_turns_nothing_happens() {
    let all: Vec<Message> = (0..4).flat_map(|n| turn(n, 1, 40)).collect();
    let store = store_with(&all).await;
    let summariser = Scripted::new(100_000, vec![]);
    let compactor = compactor(settings(4), summariser.clone());
    assert_eq!(compact(&compactor, &store, HUGE).await, None);
    // Below the threshold and not forced: nothing either.
    let small = Budget {
        window: 8_192,
        overhead: 0,
    };
    let one = crate::compactor(settings(1), summariser.clone());
    let unforced = one
        .compact(&*store, &key(), small, false, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(unforced, None);
    assert_eq!(history(&store).await, all);
    assert!(summariser.calls().is_empty());
    // Forced, with one turn kept, the first three go.
    let report = compact(&one, &store, small).await.unwrap();
    assert_eq!(report.replaced, 12);
    assert_eq!(history(&store).await[1..], all[12..]);
}
