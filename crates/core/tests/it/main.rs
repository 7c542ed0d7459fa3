//! The facade as an embedder uses it: build from a config value, send,
//! subscribe, add tools, against the strict fake OpenAI server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_trait::async_trait;
use flynn_core::protocol::config::{ProviderConfig, ProviderKind, TiersConfig};
use flynn_core::{
    AgentEvent, CancellationToken, Flynn, FlynnConfig, ToolContext, ToolError, TurnRequest,
    TypedTool,
};
use flynn_testkit::{FakeOpenAi, Reply};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// An embedder's own tool.
struct Weather;

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
}

#[async_trait]
impl TypedTool for Weather {
    type Args = WeatherArgs;

    fn name(&self) -> &str {
        "weather.get"
    }

    fn description(&self) -> &str {
        "Today's weather in a city."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn effect(&self) -> flynn_core::protocol::ToolEffect {
        flynn_core::protocol::ToolEffect::Network
    }

    async fn run(&self, args: WeatherArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(format!("sunny in {}", args.city))
    }
}

fn config(fake: &FakeOpenAi, enabled: Option<Vec<&str>>) -> FlynnConfig {
    let mut config = FlynnConfig::default();
    let mut provider = ProviderConfig::new(ProviderKind::OpenaiCompatible);
    provider.base_url = Some(fake.base_url());
    config.providers.insert("fake".into(), provider);
    config.models.tiers = TiersConfig {
        default: vec!["fake/m".parse().unwrap()],
        ..TiersConfig::default()
    };
    config.tools.enabled = enabled.map(|e| e.into_iter().map(str::to_owned).collect());
    config
}

fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_embedders_tool_runs_and_obeys_the_tools_policy() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "weather_get".into(),
        json!({"city": "Lisbon"}),
    )]));
    fake.push(Reply::Text("It is sunny.".into()));
    fake.push(Reply::Text("No weather for you.".into()));
    let home = tempfile::tempdir().unwrap();

    let flynn = Flynn::builder()
        .config(config(&fake, Some(vec!["weather.*", "file.read"])))
        .home(home.path())
        .workspace(home.path())
        .tool(Weather)
        .build()
        .await
        .unwrap();
    let mut events = Vec::new();
    let outcome = flynn
        .send(
            TurnRequest::text("app:user".parse().unwrap(), "weather?"),
            CancellationToken::new(),
            &mut |event| events.push(event),
        )
        .await
        .unwrap();
    assert_eq!(outcome.reply, "It is sunny.");
    assert!(events.contains(&AgentEvent::ToolEnd {
        id: "call_1".into(),
        name: "weather.get".into(),
        ok: true,
        output: "sunny in Lisbon".into(),
    }));
    assert_eq!(
        offered(&fake.requests()[0].body),
        ["file_read", "weather_get"]
    );

    // The same tool outside `tools.enabled` is neither offered nor run.
    let home = tempfile::tempdir().unwrap();
    let narrow = Flynn::builder()
        .config(config(&fake, Some(vec!["file.*"])))
        .home(home.path())
        .workspace(home.path())
        .tool(Weather)
        .build()
        .await
        .unwrap();
    narrow
        .send(
            TurnRequest::text("app:user".parse().unwrap(), "weather?"),
            CancellationToken::new(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(
        offered(&fake.requests()[2].body),
        ["file_edit", "file_read", "file_write", "tools_search"]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn an_enabled_pattern_that_matches_no_tool_is_refused_at_build() {
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let error = Flynn::builder()
        .config(config(&fake, Some(vec!["weather.*", "file.raed"])))
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    // The browser tools come with the `browser` feature (on whenever the
    // workspace builds the binaries, whose default build turns it on).
    let browser = if cfg!(feature = "browser") {
        "browser.click, browser.close, browser.content, browser.open, browser.screenshot, \
         browser.scroll, browser.select, browser.snapshot, browser.type, "
    } else {
        ""
    };
    assert_eq!(
        error.to_string(),
        format!(
            "tools.enabled: unknown tool(s) weather.*, file.raed (available: agents.spawn, {browser}cron.add, cron.list, cron.remove, file.edit, \
             file.list, file.read, file.search, file.write, media.send, memory.read, memory.search, memory.write, process.kill, process.list, process.output, \
             process.start, process.status, sessions.history, sessions.list, sessions.send, shell.exec, skills.read, \
             tool.output, tools.search, web.fetch, web.search)"
        )
    );
}

#[tokio::test]
async fn a_global_subscriber_sees_the_turns_of_every_session() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("one".into()));
    fake.push(Reply::Text("two".into()));
    let home = tempfile::tempdir().unwrap();
    let flynn = Flynn::builder()
        .config(config(&fake, None))
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let mut all = flynn.subscribe_all();
    for (session, text) in [("app:a", "first"), ("app:b", "second")] {
        flynn
            .send(
                TurnRequest::text(session.parse().unwrap(), text),
                CancellationToken::new(),
                &mut |_| {},
            )
            .await
            .unwrap();
    }
    let mut done = Vec::new();
    while done.len() < 2 {
        let envelope = all.next().await.unwrap().unwrap();
        if let AgentEvent::Done { outcome } = envelope.event {
            done.push((envelope.session.to_string(), outcome.reply));
        }
    }
    assert_eq!(
        done,
        [
            ("app:a".to_owned(), "one".to_owned()),
            ("app:b".to_owned(), "two".to_owned())
        ]
    );
    flynn.shutdown().await;
    assert_eq!(flynn.manager().active_lanes(), 0);
}

#[tokio::test]
async fn an_mcp_servers_tool_runs_through_the_agent_loop() {
    let server = flynn_testkit::mcp::HttpFixture::start(Some("mcp-token"));
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "calc_add".into(),
        json!({"a": 2, "b": 40}),
    )]));
    fake.push(Reply::Text("It is 42.".into()));
    let home = tempfile::tempdir().unwrap();
    let mut config = config(&fake, None);
    config.mcp.servers.insert(
        "calc".into(),
        // The project's own fixture: its hints (read-only, closed world)
        // are believed.
        serde_json::from_value(
            json!({"url": server.url(), "bearer_token": "mcp-token", "trusted": true}),
        )
        .unwrap(),
    );
    let flynn = Flynn::builder()
        .config(config)
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let mut events = Vec::new();
    let outcome = flynn
        .send(
            TurnRequest::text("app:user".parse().unwrap(), "what is 2 + 40?"),
            CancellationToken::new(),
            &mut |event| events.push(event),
        )
        .await
        .unwrap();
    assert_eq!(outcome.reply, "It is 42.");
    // Offered with the built-in tools, under its wire name; run by the
    // executor; its answer went back to the model.
    let offered = offered(&fake.requests()[0].body);
    assert!(offered.contains(&"calc_add".to_owned()), "{offered:?}");
    assert!(events.contains(&AgentEvent::ToolEnd {
        id: "call_1".into(),
        name: "calc.add".into(),
        ok: true,
        output: "42".into(),
    }));
    assert!(
        server.events().iter().any(|e| e.starts_with("call add ")),
        "{:?}",
        server.events()
    );
    let status = flynn.mcp().status();
    assert_eq!(status[0].tools, server_tool_count(&offered));
    flynn.shutdown().await;
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// How many of the offered tools are the fixture server's.
fn server_tool_count(offered: &[String]) -> usize {
    offered
        .iter()
        .filter(|name| name.starts_with("calc_"))
        .count()
}

#[tokio::test]
async fn tool_arguments_that_are_not_json_are_an_error_the_model_sees_not_a_failed_turn() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::RawSse(
        concat!(
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"file_read","arguments":"{\"a\":"}}]},"finish_reason":"tool_calls"}]}"#,
            "\n\ndata: [DONE]\n\n"
        )
        .into(),
    ));
    fake.push(Reply::Text("Sorry, trying again later.".into()));
    let home = tempfile::tempdir().unwrap();
    let flynn = Flynn::builder()
        .config(config(&fake, Some(vec!["file.read"])))
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let outcome = flynn
        .send(
            TurnRequest::text("app:user".parse().unwrap(), "read it"),
            CancellationToken::new(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(outcome.reply, "Sorry, trying again later.");
    let requests = fake.requests();
    let messages = requests[1].body["messages"].as_array().unwrap();
    let result = messages.last().unwrap();
    assert_eq!(
        result,
        &json!({
            "role": "tool",
            "tool_call_id": "call_x",
            "content": "invalid arguments for file.read: they are not valid JSON (EOF while parsing a value at line 1 column 5): {\"a\":; call the tool again with its arguments as one JSON object"
        })
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_model_call_cancelled_mid_answer_still_leaves_a_usage_row() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(
        "data: {\"choices\":[{\"delta\":{\"content\":\"Once upon\"}}]}\n\n".into(),
    ));
    let home = tempfile::tempdir().unwrap();
    let flynn = Flynn::builder()
        .config(config(&fake, None))
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let result = flynn
        .send(
            TurnRequest::text("app:user".parse().unwrap(), "tell me a story"),
            cancel.clone(),
            &mut |event| {
                if matches!(event, AgentEvent::ContentDelta { .. }) {
                    cancel.cancel();
                }
            },
        )
        .await;
    assert!(result.is_err(), "{result:?}");
    let usage = flynn
        .manager()
        .store()
        .usage_by_purpose(Some(&"app:user".parse().unwrap()))
        .await
        .unwrap();
    let calls: Vec<(u64, bool, bool)> = usage
        .iter()
        .map(|line| {
            (
                line.total.calls,
                line.total.usage.input_tokens > 0,
                line.total.usage.output_tokens > 0,
            )
        })
        .collect();
    assert_eq!(calls, vec![(1, true, true)]);
    flynn.shutdown().await;
}

/// Without a workspace named, tools work in `FLYNN_HOME/workspace`: the
/// file tools reach it although the rest of FLYNN_HOME stays hidden.
#[tokio::test]
async fn the_default_workspace_inside_flynn_home_is_open_to_the_file_tools() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "file_read".into(),
        json!({"path": "notes.txt"}),
    )]));
    fake.push(Reply::ToolCalls(vec![(
        "file_read".into(),
        json!({"path": "../sessions.db"}),
    )]));
    fake.push(Reply::Text("Noted.".into()));
    let home = tempfile::tempdir().unwrap();
    let flynn = Flynn::builder()
        .config(config(&fake, Some(vec!["file.*"])))
        .home(home.path())
        .build()
        .await
        .unwrap();
    std::fs::write(home.path().join("workspace/notes.txt"), "milk").unwrap();
    let mut ends = Vec::new();
    flynn
        .send(
            TurnRequest::text("app:user".parse().unwrap(), "note milk"),
            CancellationToken::new(),
            &mut |event| {
                if let AgentEvent::ToolEnd {
                    name, ok, output, ..
                } = event
                {
                    ends.push((name, ok, output));
                }
            },
        )
        .await
        .unwrap();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(ends[0].1 && ends[0].2.contains("milk"), "{ends:?}");
    // The rest of FLYNN_HOME stays out of reach.
    assert!(!ends[1].1, "{ends:?}");
    assert!(ends[1].2.contains("outside the workspace"), "{ends:?}");
}

#[tokio::test]
async fn the_configs_voice_reply_is_the_default_of_sessions_that_did_not_choose() {
    use flynn_core::protocol::config::VoiceReply;

    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut config = config(&fake, None);
    config.voice.reply = VoiceReply::Auto;
    let flynn = Flynn::builder()
        .config(config)
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let manager = flynn.manager();
    let session = "telegram:42".parse().unwrap();
    assert_eq!(
        manager.voice_reply(&session).await.unwrap(),
        VoiceReply::Auto
    );
    let reply = manager
        .submit(TurnRequest::text(session.clone(), "/voice off"))
        .await
        .unwrap();
    assert!(matches!(reply, flynn_core::Submitted::Command { .. }));
    assert_eq!(
        manager.voice_reply(&session).await.unwrap(),
        VoiceReply::Off
    );
    flynn.shutdown().await;
}
