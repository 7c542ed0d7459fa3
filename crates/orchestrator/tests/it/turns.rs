//! What one turn does: answers, tools, fallback, errors, usage, the tool
//! gate, agents and the prompt.

use std::sync::Arc;

use flynn_models::{Error as ModelError, PriceTable};
use flynn_orchestrator::{AgentEvent, Error, TurnRequest};
use flynn_protocol::config::{
    AgentConfig, AgentRoute, AgentsConfig, Price, ToolPolicyConfig, ToolProfile, ToolsConfig,
};
use flynn_protocol::{
    ContentBlock, Message, Resolution, Role, RunState, Tier, ToolCallSummary, ToolEffect, Usage,
};
use flynn_sessions::{Conversations, TurnStatus, Turns, UsageLog, UsageTotal};
use flynn_tools::ApproveAll;
use serde_json::json;

use crate::{Harness, Script, ScriptedModel, Setup, confirm_shell, key, tiers, tool_use};

#[tokio::test]
async fn a_plain_answer_streams_and_is_stored_with_its_turn() {
    let model = ScriptedModel::replies("m", vec![Message::assistant("Hello!")]);
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let k = key("cli:test");
    let (result, events) = h.send(&k, "hi").await;
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
    let stored = h.store.history(&k).await.unwrap();
    let turn = stored[0].turn.unwrap();
    assert_eq!(
        stored
            .iter()
            .map(|m| (m.turn, m.message.clone()))
            .collect::<Vec<_>>(),
        vec![
            (Some(turn), Message::user("hi")),
            (Some(turn), Message::assistant("Hello!"))
        ]
    );
    assert_eq!(
        h.store.turn(turn).await.unwrap().map(|t| t.status),
        Some(TurnStatus::Completed)
    );
    let request = &model.requests()[0];
    assert_eq!(request.model, "one");
    assert_eq!(request.messages, vec![Message::user("hi")]);
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        tools,
        [
            "file.edit",
            "file.read",
            "file.write",
            "shell.exec",
            "tools.search",
            "web.fetch",
        ]
    );
}

#[tokio::test]
async fn a_plain_turn_commits_twice() {
    let model = ScriptedModel::replies("m", vec![Message::assistant("Hello!")]);
    let h = Harness::new(vec![model], Setup::default()).await;
    let k = key("cli:commits");
    let before = h.store.write_commits();
    let (result, _) = h.send(&k, "hi").await;
    result.unwrap();
    // Accepted and started together (the session was idle), then answered
    // and completed together: two syncs.
    assert_eq!(h.store.write_commits() - before, 2);
    let stored = h.store.history(&k).await.unwrap();
    assert_eq!(stored.len(), 2);
    let turn = stored[1].turn.unwrap();
    assert_eq!(
        h.store.turn(turn).await.unwrap().map(|t| t.status),
        Some(TurnStatus::Completed)
    );
    assert_eq!(h.store.usage_by_tier(Some(&k)).await.unwrap()[0].1.calls, 1);
}

#[tokio::test]
async fn tool_calls_run_and_their_results_go_back_to_the_model() {
    let model = ScriptedModel::replies(
        "m",
        vec![tool_use("t1", "echo hi"), Message::assistant("It said hi.")],
    );
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let k = key("cli:test");
    let (result, events) = h.send(&k, "run echo").await;
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
    // Two model calls and a process run were timed.
    let timing = outcome.timing.as_ref().unwrap();
    assert_eq!(timing.model_calls_us.len(), 2);
    assert!(timing.tools_us > 0, "{timing:?}");
    assert!(events.contains(&AgentEvent::ToolEnd {
        id: "t1".into(),
        name: "shell.exec".into(),
        ok: true,
        output: "hi\n".into(),
    }));
    let expected = vec![
        Message::user("run echo"),
        tool_use("t1", "echo hi"),
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "hi\n".into(),
                is_error: false,
            }],
        },
        Message::assistant("It said hi."),
    ];
    assert_eq!(h.history(&k).await, expected);
    assert_eq!(*model.requests()[1].messages, expected[..3]);
}

#[tokio::test]
async fn max_iterations_ends_with_a_partial_answer_and_a_warning() {
    let model = ScriptedModel::replies(
        "m",
        vec![
            tool_use("t1", "true"),
            tool_use("t2", "true"),
            tool_use("t3", "true"),
        ],
    );
    let mut setup = Setup::default();
    setup.agents.max_iterations = 2;
    let h = Harness::new(vec![model.clone()], setup).await;
    let k = key("cli:test");
    let (result, events) = h.send(&k, "loop").await;
    let outcome = result.unwrap();
    let warning = "stopped after 2 model calls (agents.max_iterations) while the model was still using tools; the answer may be incomplete";
    assert_eq!(outcome.warning.as_deref(), Some(warning));
    assert_eq!(outcome.tool_calls.len(), 2);
    assert!(events.contains(&AgentEvent::Warning {
        message: warning.into()
    }));
    assert_eq!(model.requests().len(), 2);
    assert_eq!(h.history(&k).await.len(), 5);
}

#[tokio::test]
async fn a_failing_model_falls_back_and_says_so() {
    let boom = || {
        Script::Reply(Err(ModelError::Server {
            provider: "a".into(),
            status: 500,
            message: "boom".into(),
        }))
    };
    let broken = ScriptedModel::new("a", vec![boom(), boom(), boom()]);
    let good = ScriptedModel::replies("b", vec![Message::assistant("from b")]);
    let mut models = tiers(&["a/x", "b/y"]);
    models.retry.initial_backoff_ms = 1;
    models.retry.max_backoff_ms = 1;
    let h = Harness::new(
        vec![broken, good],
        Setup {
            models,
            ..Setup::default()
        },
    )
    .await;
    let (result, events) = h.send(&key("cli:test"), "hi").await;
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
    let broken = ScriptedModel::new(
        "a",
        vec![Script::Reply(Err(ModelError::Auth {
            provider: "a".into(),
            status: 401,
            message: "bad key".into(),
            env: Some("OPENAI_API_KEY"),
        }))],
    );
    let h = Harness::new(
        vec![broken],
        Setup {
            models: tiers(&["a/x"]),
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:test");
    let (result, events) = h.send(&k, "hi").await;
    assert!(matches!(result, Err(Error::Model(ModelError::Auth { .. }))));
    assert_eq!(
        events.last(),
        Some(&AgentEvent::RunState {
            state: RunState::Error
        })
    );
    let stored = h.store.history(&k).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].message, Message::user("hi"));
    assert_eq!(
        h.store
            .turn(stored[0].turn.unwrap())
            .await
            .unwrap()
            .map(|t| t.status),
        Some(TurnStatus::Failed)
    );
}

#[tokio::test]
async fn every_model_call_is_recorded_with_its_tier_and_cost() {
    let model = ScriptedModel::replies(
        "m",
        vec![tool_use("t1", "true"), Message::assistant("done")],
    );
    let mut prices = std::collections::BTreeMap::new();
    prices.insert(
        "m/one".to_owned(),
        Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
        },
    );
    let h = Harness::new(
        vec![model],
        Setup {
            prices: PriceTable::new(&Default::default(), &prices),
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:test");
    let (result, _) = h.send(&k, "go").await;
    let expected_cost = 2.0 * (10.0 * 1.0 + 3.0 * 2.0) / 1_000_000.0;
    assert_eq!(result.unwrap().cost_usd, Some(expected_cost));
    assert_eq!(
        h.store.usage_by_tier(Some(&k)).await.unwrap(),
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

#[tokio::test]
async fn a_call_that_needs_confirmation_is_denied_without_an_approver_and_the_model_is_told() {
    let model = ScriptedModel::replies(
        "m",
        vec![
            tool_use("t1", "touch ran.txt"),
            Message::assistant("It was denied."),
        ],
    );
    let h = Harness::new(
        vec![model.clone()],
        Setup {
            tools: confirm_shell(),
            ..Setup::default()
        },
    )
    .await;
    let (result, events) = h.send(&key("cli:test"), "touch a file").await;
    assert_eq!(result.unwrap().reply, "It was denied.");
    let denied = "shell.exec was denied: nobody can be asked to approve it in this session";
    let gate: Vec<&AgentEvent> = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                AgentEvent::ConfirmationRequested { .. }
                    | AgentEvent::ConfirmationResolved { .. }
                    | AgentEvent::ToolEnd { .. }
            )
        })
        .collect();
    assert_eq!(
        gate,
        vec![
            &AgentEvent::ConfirmationRequested {
                id: "t1".into(),
                name: "shell.exec".into(),
                input: json!({"command": "touch ran.txt"}),
                effect: ToolEffect::RunsProcesses,
                timeout_secs: 120,
                reason: None,
            },
            &AgentEvent::ConfirmationResolved {
                id: "t1".into(),
                resolution: Resolution::Denied,
            },
            &AgentEvent::ToolEnd {
                id: "t1".into(),
                name: "shell.exec".into(),
                ok: false,
                output: denied.into(),
            },
        ]
    );
    assert!(!h.dir.path().join("ran.txt").exists());
    let second = &model.requests()[1].messages;
    assert_eq!(
        second.last().unwrap().content,
        vec![ContentBlock::ToolResult {
            tool_use_id: "t1".into(),
            content: denied.into(),
            is_error: true,
        }]
    );
}

#[tokio::test]
async fn an_approver_lets_a_confirmed_call_run() {
    let model = ScriptedModel::replies(
        "m",
        vec![tool_use("t1", "touch ran.txt"), Message::assistant("Done.")],
    );
    let h = Harness::new(
        vec![model],
        Setup {
            tools: confirm_shell(),
            ..Setup::default()
        },
    )
    .await;
    let mut request = TurnRequest::text(key("cli:test"), "touch a file");
    request.approver = Some(Arc::new(ApproveAll));
    let (result, events) = h.send_request(request).await;
    assert_eq!(result.unwrap().reply, "Done.");
    assert!(events.contains(&AgentEvent::ConfirmationResolved {
        id: "t1".into(),
        resolution: Resolution::Approved,
    }));
    assert!(h.dir.path().join("ran.txt").exists());
}

fn two_agents() -> AgentsConfig {
    let mut chat = AgentConfig::new("chat");
    chat.tier = Some(Tier::Fast);
    chat.system_prompt = Some("You chat.".into());
    chat.tools = Some(ToolPolicyConfig {
        profile: Some(ToolProfile::Full),
        enabled: Some(vec!["file.*".into()]),
        deny: vec![],
        autonomy: None,
        taint: None,
    });
    let mut coder = AgentConfig::new("coder");
    coder.system_prompt = Some("You code.".into());
    AgentsConfig {
        list: vec![chat, coder],
        routes: vec![AgentRoute {
            channel: "cli".into(),
            sender: "*".into(),
            agent: "coder".into(),
        }],
        ..AgentsConfig::default()
    }
}

#[tokio::test]
async fn routes_pick_the_agent_whose_tier_tools_and_prompt_the_turn_uses() {
    let fast = ScriptedModel::echo("f");
    let main = ScriptedModel::echo("m");
    let mut models = tiers(&["m/one"]);
    models.tiers.fast = vec!["f/small".parse().unwrap()];
    let h = Harness::new(
        vec![fast.clone(), main.clone()],
        Setup {
            models,
            agents: two_agents(),
            ..Setup::default()
        },
    )
    .await;
    h.send(&key("telegram:7"), "hello chat").await.0.unwrap();
    h.send(&key("cli:me"), "hello coder").await.0.unwrap();
    let mut request = TurnRequest::text(key("cli:other"), "pinned");
    request.agent = Some("chat".into());
    h.send_request(request).await.0.unwrap();

    let chat = fast.requests();
    let coder = main.requests();
    assert_eq!((chat.len(), coder.len()), (2, 1));
    assert_eq!(chat[0].system.as_deref(), Some("You chat."));
    let names = |r: &flynn_models::ModelRequest| -> Vec<String> {
        r.tools.iter().map(|t| t.name.clone()).collect()
    };
    assert_eq!(
        names(&chat[0]),
        ["file.edit", "file.read", "file.write", "tools.search"]
    );
    assert_eq!(coder[0].system.as_deref(), Some("You code."));
    assert_eq!(
        names(&coder[0]),
        [
            "file.edit",
            "file.read",
            "file.write",
            "shell.exec",
            "tools.search",
            "web.fetch",
        ]
    );
    assert_eq!(crate::last_user_text(&chat[1].messages), "pinned");
}

#[tokio::test]
async fn refusals_happen_before_anything_is_stored() {
    let h = Harness::new(
        vec![ScriptedModel::echo("m")],
        Setup {
            agents: two_agents(),
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:test");
    let mut request = TurnRequest::text(k.clone(), "hi");
    request.agent = Some("codr".into());
    assert_eq!(
        h.send_request(request)
            .await
            .0
            .map_err(|e| e.to_string())
            .err(),
        Some("--agent: unknown agent 'codr' (agents: chat, coder)".into())
    );
    let mut request = TurnRequest::text(k.clone(), "hi");
    request.tier = Some(Tier::Local);
    let (result, _) = h.send_request(request).await;
    assert!(
        matches!(&result, Err(e) if e.code() == flynn_protocol::ErrorCode::Config),
        "{result:?}"
    );
    let mut request = TurnRequest::text(k.clone(), "hi");
    request.model = Some("nowhere/x".parse().unwrap());
    assert_eq!(
        h.send_request(request)
            .await
            .0
            .map_err(|e| e.to_string())
            .err(),
        Some("unknown provider 'nowhere' in 'nowhere/x' (configured providers: m)".into())
    );
    assert_eq!(h.store.list().await.unwrap(), vec![]);
    assert_eq!(h.store.open_turns(None).await.unwrap(), vec![]);
}

#[tokio::test]
async fn a_session_whose_tier_has_no_model_is_refused_before_anything_is_stored() {
    let h = Harness::new(
        vec![ScriptedModel::echo("m")],
        Setup {
            models: tiers(&[]),
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:test");
    let (result, _) = h.send(&k, "hi").await;
    assert_eq!(
        result.map_err(|e| (e.code(), e.to_string())).err(),
        Some((
            flynn_protocol::ErrorCode::Config,
            "no model is configured for the 'default' tier: provider m is configured, but no tier names a model of it (list one under models.tiers.default in the config file, e.g. `default: [m/<model>]`, or set FLYNN_MODEL=m/<model>)".into()
        ))
    );
    assert_eq!(h.store.list().await.unwrap(), vec![]);
}

#[tokio::test]
async fn the_prompt_is_assembled_per_turn_from_the_agent_and_workspace_files() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let k = key("cli:test");
    h.send(&k, "plain").await.0.unwrap();
    std::fs::write(h.dir.path().join("SOUL.md"), "You are warm and direct.\n").unwrap();
    std::fs::write(
        h.dir.path().join("AGENTS.md"),
        "# Rules\nRun tests before you say done.\n",
    )
    .unwrap();
    h.send(&k, "with files").await.0.unwrap();
    let requests = model.requests();
    insta::assert_snapshot!("plain_turn_prompt", requests[0].system.clone().unwrap());
    insta::assert_snapshot!(
        "prompt_with_workspace_files",
        requests[1].system.clone().unwrap()
    );
}

#[tokio::test]
async fn read_only_calls_of_one_answer_run_together_and_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "A").unwrap();
    std::fs::write(dir.path().join("b.txt"), "B").unwrap();
    let call = |id: &str, path: &str| ContentBlock::ToolUse {
        id: id.into(),
        name: "file.read".into(),
        input: json!({"path": path}),
    };
    let model = ScriptedModel::replies(
        "m",
        vec![
            Message {
                role: Role::Assistant,
                content: vec![call("r1", "a.txt"), call("r2", "b.txt")],
            },
            Message::assistant("read both"),
        ],
    );
    let h = Harness::in_dir(dir, vec![model.clone()], Setup::default()).await;
    let (result, events) = h.send(&key("cli:test"), "read").await;
    assert_eq!(result.unwrap().reply, "read both");
    // Both calls start before either ends: they ran as one batch.
    let order: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStart { id, .. } => Some(format!("start {id}")),
            AgentEvent::ToolEnd { .. } => Some("end".into()),
            _ => None,
        })
        .collect();
    assert_eq!(&order[..2], ["start r1", "start r2"]);
    let requests = model.requests();
    let results = &requests[1].messages.last().unwrap().content;
    assert_eq!(
        results,
        &vec![
            ContentBlock::ToolResult {
                tool_use_id: "r1".into(),
                content: "     1\tA\n".into(),
                is_error: false
            },
            ContentBlock::ToolResult {
                tool_use_id: "r2".into(),
                content: "     1\tB\n".into(),
                is_error: false
            },
        ]
    );
}

#[tokio::test]
async fn tools_search_adds_a_deferred_tool_to_the_next_request_of_the_turn() {
    let search = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: "s1".into(),
            name: "tools.search".into(),
            input: json!({"query": "read a file"}),
        }],
    };
    let model = ScriptedModel::replies("m", vec![search, Message::assistant("Found it.")]);
    let setup = Setup {
        tools: ToolsConfig {
            enabled: Some(vec!["shell.exec".into(), "file.read".into()]),
            deferred: Some(vec!["file.read".into()]),
            ..Setup::default().tools
        },
        ..Setup::default()
    };
    let h = Harness::new(vec![model.clone()], setup).await;
    let (result, _) = h.send(&key("cli:search"), "read notes.txt").await;
    assert_eq!(result.unwrap().reply, "Found it.");
    let offered: Vec<Vec<String>> = model
        .requests()
        .iter()
        .map(|r| r.tools.iter().map(|t| t.name.clone()).collect())
        .collect();
    assert_eq!(
        offered,
        [
            vec!["shell.exec".to_owned(), "tools.search".to_owned()],
            vec!["file.read".to_owned(), "shell.exec".to_owned()],
        ]
    );
    // A new turn starts with the deferred tool held back again.
    let model_two = ScriptedModel::replies("m", vec![Message::assistant("ok")]);
    let h = Harness::new(
        vec![model_two.clone()],
        Setup {
            tools: ToolsConfig {
                enabled: Some(vec!["shell.exec".into(), "file.read".into()]),
                deferred: Some(vec!["file.read".into()]),
                ..Setup::default().tools
            },
            ..Setup::default()
        },
    )
    .await;
    h.send(&key("cli:search"), "hi").await.0.unwrap();
    let names: Vec<String> = model_two.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["shell.exec", "tools.search"]);
}

#[tokio::test]
async fn a_provider_override_changes_the_tools_its_models_are_offered() {
    let model = ScriptedModel::replies("m", vec![Message::assistant("ok")]);
    let setup = Setup {
        tools: ToolsConfig {
            providers: [(
                "m".to_owned(),
                ToolPolicyConfig {
                    deny: vec!["shell.*".into()],
                    ..ToolPolicyConfig::default()
                },
            )]
            .into(),
            ..Setup::default().tools
        },
        ..Setup::default()
    };
    let h = Harness::new(vec![model.clone()], setup).await;
    h.send(&key("cli:local"), "hi").await.0.unwrap();
    let names: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    // The deferred tools stay held back behind tools.search.
    assert_eq!(
        names,
        [
            "file.edit",
            "file.read",
            "file.write",
            "tools.search",
            "web.fetch"
        ]
    );
}
