//! Chat commands, answered without the model.

use flynn_protocol::config::{AgentConfig, AgentsConfig, VoiceReply};
use flynn_protocol::{Message, Principal, Tier};
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

#[tokio::test]
async fn voice_sets_shows_and_forgets_the_sessions_mode_over_the_configs() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    h.manager.set_voice_default(VoiceReply::Auto);
    let k = key("telegram:42");
    let from_config = "Voice replies: auto — a voice note is answered with a voice note (the config's voice.reply)";
    assert_eq!(
        h.command(&k, "/voice").await,
        format!("{from_config}. Change it with /voice on, /voice auto or /voice off.")
    );
    assert_eq!(h.manager.voice_reply(&k).await.unwrap(), VoiceReply::Auto);

    assert_eq!(
        h.command(&k, "/voice on").await,
        "Voice replies: on — every answer is also spoken."
    );
    assert_eq!(
        h.store.metadata(&k).await.unwrap().voice,
        Some(VoiceReply::Always)
    );
    assert_eq!(h.manager.voice_reply(&k).await.unwrap(), VoiceReply::Always);
    assert_eq!(
        h.command(&k, "/voice status").await,
        "Voice replies: on — every answer is also spoken (this session). Change it with /voice on, /voice auto or /voice off, or /voice default for the config's."
    );
    // The session's own "off" wins over the config's "auto".
    assert_eq!(
        h.command(&k, "/voice off").await,
        "Voice replies: off — answers are text only."
    );
    assert_eq!(h.manager.voice_reply(&k).await.unwrap(), VoiceReply::Off);
    // Other settings of the session leave it alone, and it leaves them.
    h.command(&k, "/agent main").await;
    assert_eq!(
        h.store.metadata(&k).await.unwrap(),
        flynn_sessions::SessionMeta {
            agent: Some("main".into()),
            voice: Some(VoiceReply::Off),
            ..Default::default()
        }
    );
    assert_eq!(
        h.command(&k, "/voice default").await,
        format!("{from_config}.")
    );
    assert_eq!(h.store.metadata(&k).await.unwrap().voice, None);
    assert_eq!(h.manager.voice_reply(&k).await.unwrap(), VoiceReply::Auto);

    assert_eq!(
        h.manager
            .submit(flynn_orchestrator::TurnRequest::text(
                k.clone(),
                "/voice loud"
            ))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(
            "/voice: 'loud' is not a voice reply mode (expected on, always, auto, off, default or status)"
                .into()
        )
    );
    // Commands are not messages, and none reached the model.
    assert_eq!(h.history(&k).await, Vec::<Message>::new());
    assert_eq!(model.requests().len(), 0);
    // Another session follows the config.
    assert_eq!(
        h.manager.voice_reply(&key("telegram:7")).await.unwrap(),
        VoiceReply::Auto
    );
}

#[tokio::test]
async fn a_sessions_voice_mode_outlives_a_restart_and_shows_in_status() {
    let h = Harness::new(vec![ScriptedModel::echo("m")], Setup::default()).await;
    let k = key("telegram:42");
    assert_eq!(
        h.command(&k, "/voice auto").await,
        "Voice replies: auto — a voice note is answered with a voice note."
    );
    let Harness {
        dir,
        manager,
        store,
        ..
    } = h;
    manager.shutdown().await;
    store.close().await;
    drop((manager, store));

    let h = Harness::in_dir(dir, vec![ScriptedModel::echo("m")], Setup::default()).await;
    // This runtime's default is "off"; the session chose for itself.
    assert_eq!(h.manager.voice_reply(&k).await.unwrap(), VoiceReply::Auto);
    let status = h.command(&k, "/status").await;
    assert_eq!(
        status
            .lines()
            .filter(|line| line.starts_with("Voice replies:"))
            .collect::<Vec<_>>(),
        ["Voice replies: auto — a voice note is answered with a voice note (this session)"],
        "{status}"
    );
}

#[tokio::test]
async fn a_guest_sees_the_voice_mode_but_may_not_change_it() {
    let h = Harness::new(vec![ScriptedModel::echo("m")], Setup::default()).await;
    let k = key("telegram:42");
    let guest = |text: &str| {
        let mut request = flynn_orchestrator::TurnRequest::text(k.clone(), text);
        request.principal = Principal::Guest {
            channel: "telegram".into(),
            id: "42".into(),
        };
        request
    };
    let reply = |submitted| match submitted {
        flynn_orchestrator::Submitted::Command { reply, .. } => reply,
        flynn_orchestrator::Submitted::Turn(_) => panic!("a turn, not a command"),
    };
    for text in ["/voice on", "/voice default"] {
        assert_eq!(
            reply(h.manager.submit(guest(text)).await.unwrap()),
            "Only the owner can change voice replies with /voice."
        );
    }
    assert_eq!(h.store.metadata(&k).await.unwrap().voice, None);
    assert_eq!(
        reply(h.manager.submit(guest("/voice")).await.unwrap()),
        "Voice replies: off — answers are text only (the config's voice.reply). Change it with /voice on, /voice auto or /voice off."
    );
}
