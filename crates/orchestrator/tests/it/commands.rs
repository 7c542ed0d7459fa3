//! Chat commands, answered without the model.

use flynn_protocol::config::{AgentConfig, AgentsConfig};
use flynn_protocol::{Message, Tier};
use flynn_sessions::Conversations;

use crate::{Harness, ScriptedModel, Setup, key, tiers};

#[tokio::test]
async fn help_status_and_compact_answer_without_the_model() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let k = key("cli:cmd");
    h.send(&k, "hello").await.0.unwrap();
    assert_eq!(h.command(&k, "/help").await, flynn_orchestrator::HELP);
    insta::assert_snapshot!("status_after_one_turn", h.command(&k, "/status").await);
    assert_eq!(
        h.command(&k, "/compact").await,
        "Nothing to compact: the conversation has no more than the last 4 turns, which are always kept."
    );
    assert_eq!(h.command(&k, "/cancel").await, "Nothing is running.");
    assert_eq!(model.requests().len(), 1);
    // Commands are not messages of the conversation.
    assert_eq!(h.history(&k).await.len(), 2);
}

#[tokio::test]
async fn model_persists_in_the_session_and_routes_its_next_turns() {
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::echo("f");
    let mut models = tiers(&["m/one"]);
    models.tiers.fast = vec!["f/small".parse().unwrap()];
    let h = Harness::new(
        vec![main.clone(), fast.clone()],
        Setup {
            models,
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:cmd");
    assert_eq!(
        h.command(&k, "/model fast").await,
        "This session now uses the fast tier (f/small first)."
    );
    assert_eq!(h.store.metadata(&k).await.unwrap().tier, Some(Tier::Fast));
    assert_eq!(h.send(&k, "quick").await.0.unwrap().provider, "f");
    assert_eq!(
        h.command(&k, "/model m/other").await,
        "This session now uses the model m/other (no fallback)."
    );
    let outcome = h.send(&k, "pinned").await.0.unwrap();
    assert_eq!(
        (outcome.provider.as_str(), outcome.model.as_str()),
        ("m", "other")
    );
    assert_eq!(
        h.command(&k, "/model").await,
        "This session uses the model m/other (no fallback). Change it with /model <fast|default|complex|local> or /model <provider/model>."
    );
    assert_eq!(
        h.manager
            .submit(flynn_orchestrator::TurnRequest::text(
                k.clone(),
                "/model nowhere/x"
            ))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err("unknown provider 'nowhere' in 'nowhere/x' (configured providers: f, m)".into())
    );
    // Another session is not affected.
    assert_eq!(
        h.send(&key("cli:other"), "hi").await.0.unwrap().provider,
        "m"
    );
}

#[tokio::test]
async fn agent_switches_the_session_and_reset_forgets_everything() {
    let mut coder = AgentConfig::new("coder");
    coder.system_prompt = Some("You code.".into());
    let model = ScriptedModel::echo("m");
    let h = Harness::new(
        vec![model.clone()],
        Setup {
            agents: AgentsConfig {
                list: vec![AgentConfig::new("chat"), coder],
                ..AgentsConfig::default()
            },
            ..Setup::default()
        },
    )
    .await;
    let k = key("cli:cmd");
    assert_eq!(
        h.command(&k, "/agent").await,
        "Agents:\n- chat (this session)\n- coder"
    );
    assert_eq!(
        h.command(&k, "/agent coder").await,
        "This session now talks to the agent 'coder'."
    );
    h.send(&k, "write code").await.0.unwrap();
    assert_eq!(model.requests()[0].system.as_deref(), Some("You code."));
    assert_eq!(
        h.manager
            .submit(flynn_orchestrator::TurnRequest::text(
                k.clone(),
                "/agent nobody"
            ))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err("/agent: unknown agent 'nobody' (agents: chat, coder)".into())
    );
    assert_eq!(
        h.command(&k, "/reset").await,
        "Conversation reset: this session starts afresh."
    );
    assert_eq!(h.history(&k).await, Vec::<Message>::new());
    assert_eq!(h.store.metadata(&k).await.unwrap(), Default::default());
    h.send(&k, "who are you?").await.0.unwrap();
    assert_ne!(model.requests()[1].system.as_deref(), Some("You code."));
}
