//! Delegation to cheap tiers, sub-agents, agent-to-agent tools, tier
//! escalation and tool-output summaries.

use std::sync::Arc;
use std::time::Duration;

use flynn_orchestrator::{
    AgentEvent, SUBAGENT_PROMPT, SubAgentRequest, TOOL_SUMMARY_PROMPT, TurnRequest,
};
use flynn_protocol::config::{AgentsConfig, DelegationConfig, TiersConfig};
use flynn_protocol::{ContentBlock, Message, Purpose, Role, Tier};
use flynn_sessions::{Conversations, Turns, UsageLog};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{Harness, Script, ScriptedModel, Setup, key, tiers};

fn call(id: &str, name: &str, input: Value) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }],
    }
}

/// Tiers: default `m/one`, fast `f/cheap`, complex `c/big`.
fn three_tiers() -> Setup {
    let mut models = tiers(&["m/one"]);
    models.tiers = TiersConfig {
        fast: vec!["f/cheap".parse().unwrap()],
        complex: vec!["c/big".parse().unwrap()],
        ..models.tiers
    };
    Setup {
        models,
        ..Setup::default()
    }
}

/// The tool result the model got for `id`, from its last request.
fn result_for(client: &ScriptedModel, id: &str) -> (String, bool) {
    let request = client.requests().pop().unwrap();
    request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } if tool_use_id == id => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id} in {request:?}"))
}

async fn purposes(h: &Harness) -> Vec<(Tier, Purpose, u64)> {
    h.store
        .usage_by_purpose(None)
        .await
        .unwrap()
        .into_iter()
        .map(|line| (line.tier, line.purpose, line.total.calls))
        .collect()
}

#[tokio::test]
async fn delegation_runs_on_the_purposes_tier_and_is_costed_there() {
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::replies("f", vec![Message::assistant("a summary")]);
    let big = ScriptedModel::echo("c");
    let h = Harness::new(vec![main.clone(), fast.clone(), big.clone()], three_tiers()).await;
    let k = key("cli:a");

    let result = h
        .manager
        .orchestrator()
        .delegate(
            SubAgentRequest::new(Purpose::Compaction, k.clone(), "Summarise.", "a long talk"),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result.content, "a summary");
    assert_eq!(
        (result.tier, result.model.to_string()),
        (Tier::Fast, "f/cheap".to_owned())
    );
    let asked = fast.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].system.as_deref(), Some("Summarise."));
    assert_eq!(asked[0].messages, vec![Message::user("a long talk")]);
    assert!(asked[0].tools.is_empty(), "delegated calls offer no tools");
    assert!(main.requests().is_empty() && big.requests().is_empty());
    assert_eq!(
        purposes(&h).await,
        vec![(Tier::Fast, Purpose::Compaction, 1)]
    );
    // Complex reasoning goes to the complex tier.
    h.manager
        .orchestrator()
        .delegate(
            SubAgentRequest::new(Purpose::ComplexReasoning, k, "Think.", "hard"),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(big.requests().len(), 1);
}

#[tokio::test]
async fn the_delegation_tier_follows_config_and_depth_is_limited() {
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::echo("f");
    let mut setup = three_tiers();
    setup.agents = AgentsConfig {
        delegation: DelegationConfig {
            compaction: Tier::Default,
            ..DelegationConfig::default()
        },
        max_delegation_depth: 2,
        ..AgentsConfig::default()
    };
    let h = Harness::new(vec![main.clone(), fast.clone()], setup).await;
    let orchestrator = h.manager.orchestrator();
    let request = SubAgentRequest::new(Purpose::Compaction, key("cli:a"), "s", "m");
    orchestrator
        .delegate(request.clone(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((main.requests().len(), fast.requests().len()), (1, 0));
    assert_eq!(
        purposes(&h).await,
        vec![(Tier::Default, Purpose::Compaction, 1)]
    );

    let too_deep = SubAgentRequest {
        depth: 2,
        ..request
    };
    let error = orchestrator
        .delegate(too_deep, &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "delegation depth 3 is more than agents.max_delegation_depth (2); do this part yourself instead of delegating it"
    );
    assert_eq!(main.requests().len(), 1, "nothing was sent");
}

#[tokio::test]
async fn a_sub_agent_without_tools_answers_from_its_tier_and_the_parent_gets_it() {
    let main = ScriptedModel::replies(
        "m",
        vec![
            call(
                "s1",
                "agents.spawn",
                json!({"task": "List three primes.", "tier": "fast"}),
            ),
            Message::assistant("The sub-agent says 2, 3, 5."),
        ],
    );
    let fast = ScriptedModel::replies("f", vec![Message::assistant("2, 3, 5")]);
    let h = Harness::new(vec![main.clone(), fast.clone()], three_tiers()).await;

    let (outcome, _) = h.send(&key("cli:a"), "primes please").await;
    assert_eq!(outcome.unwrap().reply, "The sub-agent says 2, 3, 5.");
    let asked = &fast.requests()[0];
    assert_eq!(asked.system.as_deref(), Some(SUBAGENT_PROMPT));
    assert_eq!(asked.messages, vec![Message::user("List three primes.")]);
    let (content, is_error) = result_for(&main, "s1");
    assert!(!is_error);
    assert!(
        content.starts_with("2, 3, 5\n\n[sub-agent answer from f/cheap on the fast tier]"),
        "{content}"
    );
    assert_eq!(
        purposes(&h).await,
        vec![
            (Tier::Fast, Purpose::Subagent, 1),
            (Tier::Default, Purpose::Conversation, 2)
        ]
    );
}

#[tokio::test]
async fn a_sub_agent_with_tools_works_in_its_own_session_and_reports_back() {
    let main = ScriptedModel::replies(
        "m",
        vec![
            call(
                "s1",
                "agents.spawn",
                json!({"task": "Write hello to note.txt", "tier": "fast", "tools": true}),
            ),
            Message::assistant("Done."),
        ],
    );
    let fast = ScriptedModel::replies(
        "f",
        vec![
            call(
                "w1",
                "file.write",
                json!({"path": "note.txt", "content": "hello"}),
            ),
            Message::assistant("Wrote note.txt."),
        ],
    );
    let h = Harness::new(vec![main.clone(), fast.clone()], three_tiers()).await;

    let (outcome, _) = h.send(&key("cli:a"), "make a note").await;
    assert_eq!(outcome.unwrap().reply, "Done.");
    assert_eq!(
        std::fs::read_to_string(h.dir.path().join("note.txt")).unwrap(),
        "hello"
    );
    let (content, is_error) = result_for(&main, "s1");
    assert!(!is_error, "{content}");
    assert!(content.starts_with("Wrote note.txt."), "{content}");
    assert!(
        content.contains("on the fast tier (f/cheap): 1 tool calls]"),
        "{content}"
    );
    // The child session holds the sub-agent's work; the parent's does not.
    let sessions = h.store.list().await.unwrap();
    let child = sessions
        .iter()
        .find(|s| s.key.channel() == "agent")
        .expect("a child session");
    assert!(child.key.peer().starts_with("a-"), "{}", child.key);
    let child_history = h.history(&child.key).await;
    assert_eq!(child_history[0], Message::user("Write hello to note.txt"));
    assert!(
        child_history
            .iter()
            .any(|m| m.tool_uses().any(|(_, name, _)| name == "file.write"))
    );
    let parent = h.history(&key("cli:a")).await;
    assert!(
        !parent
            .iter()
            .any(|m| m.tool_uses().any(|(_, name, _)| name == "file.write"))
    );
}

#[tokio::test]
async fn cancelling_the_parent_cancels_its_running_sub_agent() {
    let main = ScriptedModel::replies(
        "m",
        vec![call(
            "s1",
            "agents.spawn",
            json!({"task": "think forever", "tier": "fast", "tools": true}),
        )],
    );
    let fast = ScriptedModel::new("f", vec![Script::Hang("thinking".into())]);
    let h = Harness::new(vec![main.clone(), fast.clone()], three_tiers()).await;
    let k = key("cli:a");
    let handle = h.submit(&k, "go").await;
    // Wait until the sub-agent's model is running.
    tokio::time::timeout(Duration::from_secs(10), async {
        while fast.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the sub-agent started");
    assert!(h.manager.cancel(&k));
    let error = tokio::time::timeout(Duration::from_secs(10), handle.outcome())
        .await
        .expect("the parent ended")
        .unwrap_err();
    assert!(
        matches!(error, flynn_orchestrator::Error::Cancelled),
        "{error}"
    );
    let child = h
        .store
        .list()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.key.channel() == "agent")
        .unwrap();
    // The child's turn ends cancelled too, soon after.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let open = h.store.open_turns(Some(&child.key)).await.unwrap();
            if open.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "the sub-agent's turn is still open");
    // Nothing answered in the child: its model call was dropped.
    let child_history = h.history(&child.key).await;
    assert!(
        child_history.iter().all(|m| m.role == Role::User),
        "{child_history:?}"
    );
}

#[tokio::test]
async fn sessions_tools_read_and_message_other_sessions_of_the_same_agent() {
    // One model serves both sessions, in this order.
    let main = ScriptedModel::replies(
        "m",
        vec![
            Message::assistant("Noted: Friday."),
            call("l1", "sessions.list", json!({})),
            call("h1", "sessions.history", json!({"session": "cli:b"})),
            call(
                "s1",
                "sessions.send",
                json!({"session": "cli:b", "message": "when is the deploy?"}),
            ),
            // b's turn, answering a's message.
            Message::assistant("Friday."),
            call(
                "s2",
                "sessions.send",
                json!({"session": "cli:a", "message": "me"}),
            ),
            call(
                "s3",
                "sessions.history",
                json!({"session": "telegram:nobody"}),
            ),
            Message::assistant("done"),
        ],
    );
    let h = Harness::new(vec![main.clone()], Setup::default()).await;
    let (a, b) = (key("cli:a"), key("cli:b"));
    h.send(&b, "the deploy is on Friday").await.0.unwrap();
    // Another session's history is untrusted content: from then on the
    // sends and reads ask a person (tests/it/taint.rs), who says yes here.
    let mut request = TurnRequest::text(a.clone(), "ask b about the deploy");
    request.approver = Some(Arc::new(Person));
    let (outcome, _) = h.send_request(request).await;
    assert_eq!(outcome.unwrap().reply, "done");

    let requests = main.requests();
    let result = |id: &str| {
        requests
            .iter()
            .flat_map(|r| r.messages.iter())
            .flat_map(|m| &m.content)
            .find_map(|block| match block {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } if tool_use_id == id => Some((content.clone(), *is_error)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    let (list, _) = result("l1");
    assert!(list.contains("- cli:a (this session)"), "{list}");
    assert!(list.contains("- cli:b: 2 messages"), "{list}");
    let (history, _) = result("h1");
    assert_eq!(
        history,
        flynn_protocol::wrap_untrusted(
            "sessions.history",
            "user: the deploy is on Friday\nassistant: Noted: Friday.\n"
        )
    );
    let (answer, is_error) = result("s1");
    assert!(!is_error, "{answer}");
    assert_eq!(answer, "Friday.\n\n[answer from session cli:b]");
    // b's agent was told who asked.
    let b_history = h.history(&b).await;
    assert!(b_history[2].text().starts_with(
        "[message from session cli:a (agent main), answered automatically]\nwhen is the deploy?"
    ));
    let (own, is_error) = result("s2");
    assert!(is_error && own.contains("that is this session"), "{own}");
    let (unknown, is_error) = result("s3");
    assert!(
        is_error && unknown.contains("no session 'telegram:nobody'"),
        "{unknown}"
    );
}

#[tokio::test]
async fn session_access_keeps_other_agents_sessions_out_of_sight() {
    let setup = Setup {
        agents: AgentsConfig {
            list: vec![
                flynn_protocol::config::AgentConfig::new("main"),
                flynn_protocol::config::AgentConfig::new("work"),
            ],
            routes: vec![flynn_protocol::config::AgentRoute {
                channel: "slack".into(),
                sender: "*".into(),
                agent: "work".into(),
            }],
            ..AgentsConfig::default()
        },
        ..Setup::default()
    };
    let main = ScriptedModel::replies(
        "m",
        vec![
            Message::assistant("ok"),
            call("h1", "sessions.history", json!({"session": "slack:boss"})),
            call("l1", "sessions.list", json!({})),
            Message::assistant("done"),
        ],
    );
    let h = Harness::new(vec![main.clone()], setup).await;
    h.send(&key("slack:boss"), "secret plans").await.0.unwrap();
    h.send(&key("cli:me"), "peek").await.0.unwrap();
    let (history, is_error) = result_for_in(&main, "h1");
    assert!(is_error, "{history}");
    assert!(history.contains("agents.session_access"), "{history}");
    let (list, _) = result_for_in(&main, "l1");
    assert!(!list.contains("slack:boss"), "{list}");
}

/// The result for `id` in any request the client got.
fn result_for_in(client: &ScriptedModel, id: &str) -> (String, bool) {
    client
        .requests()
        .iter()
        .flat_map(|r| r.messages.to_vec())
        .flat_map(|m| m.content)
        .find_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } if tool_use_id == id => Some((content, is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test]
async fn a_turn_out_of_iterations_escalates_once_to_complex_and_says_so() {
    let mut setup = three_tiers();
    setup.agents = AgentsConfig {
        max_iterations: 1,
        auto_escalate: true,
        ..AgentsConfig::default()
    };
    let main = ScriptedModel::replies("m", vec![call("t1", "file.list", json!({}))]);
    let big = ScriptedModel::replies("c", vec![Message::assistant("Solved on complex.")]);
    let h = Harness::new(vec![main.clone(), big.clone()], setup).await;
    let (outcome, events) = h.send(&key("cli:a"), "hard task").await;
    let outcome = outcome.unwrap();
    assert_eq!(outcome.reply, "Solved on complex.");
    assert_eq!(outcome.warning, None);
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Warning { message } if message.contains("continuing once on the complex tier"))), "{events:?}");
    // The complex model saw the whole turn so far.
    let seen = &big.requests()[0].messages;
    assert!(
        seen.iter()
            .any(|m| m.tool_uses().any(|(id, _, _)| id == "t1"))
    );
    assert_eq!(
        purposes(&h).await,
        vec![
            (Tier::Default, Purpose::Conversation, 1),
            (Tier::Complex, Purpose::ComplexReasoning, 1)
        ]
    );
}

#[tokio::test]
async fn an_unsure_answer_offers_the_complex_tier_when_auto_escalate_is_on() {
    let unsure = "I’m not sure, but it might be a DNS problem.";
    for auto_escalate in [true, false] {
        let mut setup = three_tiers();
        setup.agents = AgentsConfig {
            auto_escalate,
            ..AgentsConfig::default()
        };
        let main = ScriptedModel::replies(
            "m",
            vec![
                Message::assistant(unsure),
                Message::assistant("It is a DNS problem."),
            ],
        );
        let big = ScriptedModel::echo("c");
        let h = Harness::new(vec![main.clone(), big.clone()], setup).await;
        let (outcome, events) = h.send(&key("cli:a"), "why is the site down?").await;
        let outcome = outcome.unwrap();
        assert_eq!(outcome.reply, unsure);
        if auto_escalate {
            let offer = outcome.warning.unwrap();
            assert_eq!(
                offer,
                "the model (default tier) says it is unsure; send `/model complex` and ask again for the complex tier (agents.auto_escalate)"
            );
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e, AgentEvent::Warning { message } if *message == offer))
            );
        } else {
            assert_eq!(outcome.warning, None);
        }
        // A sure answer offers nothing.
        let (sure, _) = h.send(&key("cli:a"), "and now?").await;
        assert_eq!(sure.unwrap().warning, None);
        // Only an offer: the complex tier was not called.
        assert!(big.requests().is_empty());
    }
}

#[tokio::test]
async fn without_auto_escalate_a_turn_stops_at_max_iterations() {
    let mut setup = three_tiers();
    setup.agents = AgentsConfig {
        max_iterations: 1,
        ..AgentsConfig::default()
    };
    let main = ScriptedModel::replies("m", vec![call("t1", "file.list", json!({}))]);
    let big = ScriptedModel::echo("c");
    let h = Harness::new(vec![main.clone(), big.clone()], setup).await;
    let (outcome, _) = h.send(&key("cli:a"), "hard task").await;
    assert!(
        outcome
            .unwrap()
            .warning
            .unwrap()
            .contains("stopped after 1 model calls")
    );
    assert!(big.requests().is_empty());
}

#[tokio::test]
async fn long_tool_output_is_condensed_on_the_fast_tier_and_readable_whole() {
    let mut setup = three_tiers();
    setup.tools.summarise_over_bytes = Some(1024);
    let main = ScriptedModel::replies(
        "m",
        vec![
            call("r1", "file.read", json!({"path": "big.log"})),
            call("o1", "tool.output", json!({"id": "r1", "offset": 0})),
            Message::assistant("read it"),
        ],
    );
    let fast = ScriptedModel::replies("f", vec![Message::assistant("ERROR at line 77: disk full")]);
    let h = Harness::new(vec![main.clone(), fast.clone()], setup).await;
    let log: String = (0..200).map(|i| format!("line {i}: ok\n")).collect();
    std::fs::write(h.dir.path().join("big.log"), &log).unwrap();

    let (outcome, events) = h.send(&key("cli:a"), "check the log").await;
    assert_eq!(outcome.unwrap().reply, "read it");
    let (condensed, _) = result_for_in(&main, "r1");
    assert!(
        condensed.starts_with("[condensed from ") && condensed.contains("by the fast tier; the whole output: tool.output {\"id\": \"r1\"}]\nERROR at line 77: disk full"),
        "{condensed}"
    );
    assert!(condensed.len() < 300);
    let asked = &fast.requests()[0];
    assert_eq!(asked.system.as_deref(), Some(TOOL_SUMMARY_PROMPT));
    assert!(asked.messages[0].text().contains("line 199: ok"));
    // The whole output comes back with tool.output, and the event showed it.
    let (whole, is_error) = result_for_in(&main, "o1");
    assert!(!is_error);
    assert!(
        whole.contains("line 0: ok") && whole.contains("line 199: ok"),
        "{whole}"
    );
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolEnd { id, output, .. } if id == "r1" && output.contains("line 150: ok"))));
    assert_eq!(
        purposes(&h).await,
        vec![
            (Tier::Fast, Purpose::ToolSummarisation, 1),
            (Tier::Default, Purpose::Conversation, 3)
        ]
    );
}

/// A person who approves every call (unlike `--yes`, a person's answer
/// counts for calls in a session holding untrusted content).
struct Person;

#[async_trait::async_trait]
impl flynn_tools::Approver for Person {
    async fn approve(&self, _: &flynn_tools::ApprovalRequest) -> flynn_tools::Decision {
        flynn_tools::Decision::Approve
    }
}

#[tokio::test]
async fn a_delegated_call_dropped_by_a_timeout_still_leaves_a_usage_row() {
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::new("f", vec![Script::Hang("summar".into())]);
    let h = Harness::new(vec![main, fast.clone()], three_tiers()).await;
    let k = key("cli:a");
    // As the summariser's timeout does: the call is dropped half-way.
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        h.manager.orchestrator().delegate(
            SubAgentRequest::new(Purpose::Compaction, k, "Summarise.", "a long talk"),
            &CancellationToken::new(),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the hanging call answered: {dropped:?}");
    assert_eq!(fast.requests().len(), 1);
    // The row is written on a task of its own, soon after.
    let recorded = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let lines = h.store.usage_by_purpose(None).await.unwrap();
            if let Some(line) = lines.first() {
                break (
                    line.tier,
                    line.purpose,
                    line.total.calls,
                    line.total.usage.input_tokens > 0,
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("no usage row for the dropped call");
    assert_eq!(recorded, (Tier::Fast, Purpose::Compaction, 1, true));
}

#[tokio::test(start_paused = true)]
async fn a_sub_agent_that_starts_its_own_runs_in_its_place_instead_of_waiting_forever() {
    // One place: the child holds it, and its own sub-agent must not wait
    // for it (that wait would last until agents.subagents.timeout_secs).
    let main = ScriptedModel::replies(
        "m",
        vec![
            call(
                "s1",
                "agents.spawn",
                json!({"task": "Ask a helper.", "tier": "fast", "tools": true}),
            ),
            Message::assistant("All done."),
        ],
    );
    let fast = ScriptedModel::replies(
        "f",
        vec![call(
            "s2",
            "agents.spawn",
            json!({"task": "Help.", "tier": "fast", "tools": true}),
        )],
    );
    let mut setup = three_tiers();
    setup.agents.subagents.max_concurrent = 1;
    // A store on a real-time runtime of its own: the paused clock moves
    // only while the turn waits on a timer.
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(flynn_testkit::store::RealTimeStore::open_at(&dir.path().join("s.db")).await);
    let clients = std::collections::HashMap::from([
        (
            "m".to_owned(),
            main.clone() as Arc<dyn flynn_models::ModelClient>,
        ),
        (
            "f".to_owned(),
            fast.clone() as Arc<dyn flynn_models::ModelClient>,
        ),
    ]);
    let manager = crate::manager_with(dir.path(), store, clients, setup);

    let turn = async {
        let submitted = manager
            .submit(flynn_orchestrator::TurnRequest::text(
                key("cli:a"),
                "delegate twice",
            ))
            .await
            .unwrap();
        let flynn_orchestrator::Submitted::Turn(handle) = submitted else {
            panic!("a turn");
        };
        handle.outcome().await
    };
    // The sub-agent timeout (300 s) would end the wait; well before it:
    let outcome = tokio::time::timeout(Duration::from_secs(60), turn)
        .await
        .expect("the nested sub-agent did not wait for a place its parent holds");
    assert_eq!(outcome.unwrap().reply, "All done.");
    let (content, is_error) = result_for(&main, "s1");
    assert!(!is_error, "{content}");
    // The grandchild answered (an echo), then the child (an echo of the
    // grandchild's result).
    assert_eq!(fast.requests().len(), 3);
    manager.shutdown().await;
}
