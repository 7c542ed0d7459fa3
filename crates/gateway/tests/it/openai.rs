//! `/v1/chat/completions` and `/v1/models` driven by async-openai, an
//! OpenAI client the project did not write.

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessageArgs, ChatCompletionRequestSystemMessageArgs,
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use flynn_testkit::{FakeOpenAi, Reply};
use futures::StreamExt;
use serde_json::json;

use crate::harness::*;

fn client(harness: &Harness, key: &str) -> Client<OpenAIConfig> {
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(harness.url("/v1"))
            .with_api_key(key),
    )
}

#[tokio::test]
async fn an_openai_client_lists_models_and_gets_answers_streaming_and_not() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Paris.".into()));
    fake.push(Reply::Text("It is the capital of France.".into()));
    let mut harness = Harness::start(&fake).await;
    let openai = client(&harness, TOKEN);

    let models = openai.models().list().await.unwrap();
    let ids: Vec<&str> = models.data.iter().map(|m| m.id.as_str()).collect();
    assert!(
        ids.contains(&"main") && ids.contains(&"default") && ids.contains(&"fast"),
        "{ids:?}"
    );

    let request = CreateChatCompletionRequestArgs::default()
        .model("main")
        .messages(vec![
            ChatCompletionRequestSystemMessageArgs::default()
                .content("Answer briefly.")
                .build()
                .unwrap()
                .into(),
            ChatCompletionRequestUserMessageArgs::default()
                .content("What is the capital of France?")
                .build()
                .unwrap()
                .into(),
        ])
        .build()
        .unwrap();
    let answer = openai.chat().create(request).await.unwrap();
    assert_eq!(answer.choices[0].message.content.as_deref(), Some("Paris."));
    let usage = answer.usage.unwrap();
    assert_eq!(usage.prompt_tokens, 12);
    // The client's earlier messages reached the model.
    let sent = &fake.requests()[0].body["messages"];
    assert!(sent.to_string().contains("Answer briefly."), "{sent}");

    let request = CreateChatCompletionRequestArgs::default()
        .model("default")
        .messages(vec![
            ChatCompletionRequestUserMessageArgs::default()
                .content("What is the capital of France?")
                .build()
                .unwrap()
                .into(),
            ChatCompletionRequestAssistantMessageArgs::default()
                .content("Paris.")
                .build()
                .unwrap()
                .into(),
            ChatCompletionRequestUserMessageArgs::default()
                .content("Why?")
                .build()
                .unwrap()
                .into(),
        ])
        .stream(true)
        .build()
        .unwrap();
    let mut stream = openai.chat().create_stream(request).await.unwrap();
    let mut text = String::new();
    let mut finish = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        for choice in chunk.choices {
            if let Some(delta) = choice.delta.content {
                text.push_str(&delta);
            }
            if choice.finish_reason.is_some() {
                finish = choice.finish_reason;
            }
        }
    }
    assert_eq!(text, "It is the capital of France.");
    assert!(finish.is_some());
    let second = &fake.requests()[1].body["messages"];
    let roles: Vec<&str> = second
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        &roles[roles.len() - 3..],
        ["user", "assistant", "user"],
        "{second}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn tools_run_inside_flynn_and_the_client_sees_the_answer() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "file_read".into(),
        json!({"path": "todo.md"}),
    )]));
    fake.push(Reply::Text("Your list says: buy milk.".into()));
    let mut harness = Harness::start(&fake).await;
    std::fs::write(harness._home.path().join("todo.md"), "- buy milk\n").unwrap();
    let openai = client(&harness, TOKEN);
    let request = CreateChatCompletionRequestArgs::default()
        .model("main")
        .user("bob")
        .messages(vec![
            ChatCompletionRequestUserMessageArgs::default()
                .content("What is on my todo list?")
                .build()
                .unwrap()
                .into(),
        ])
        .stream(true)
        .build()
        .unwrap();
    let mut stream = openai.chat().create_stream(request).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        for choice in chunk.unwrap().choices {
            text.push_str(choice.delta.content.as_deref().unwrap_or_default());
        }
    }
    assert_eq!(text, "Your list says: buy milk.");
    // The tool ran in Flynn: its output went back to the model.
    let second = fake.requests()[1].body["messages"].to_string();
    assert!(second.contains("buy milk"), "{second}");
    // `user` named a session that keeps the conversation.
    let history = harness
        .flynn
        .sessions()
        .history(&"openai:bob".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(history.len(), 4, "user, tool call, tool result, answer");
    harness.stop().await;
}

#[tokio::test]
async fn openai_clients_get_openai_errors() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-9")
        .messages(vec![
            ChatCompletionRequestUserMessageArgs::default()
                .content("hi")
                .build()
                .unwrap()
                .into(),
        ])
        .build()
        .unwrap();
    let error = client(&harness, TOKEN)
        .chat()
        .create(request.clone())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("gpt-9") && text.contains("main"), "{text}");
    let error = client(&harness, "wrong")
        .chat()
        .create(request)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("token is wrong"), "{error}");
    assert!(fake.requests().is_empty());
    harness.stop().await;
}

#[tokio::test]
async fn a_stream_that_fell_behind_past_its_turns_end_still_ends_and_the_lane_retires() {
    let fake = FakeOpenAi::start().await;
    // The first answer streams far more than the socket holds while its
    // reader waits, and the second more than the session's event ring:
    // the first turn's last events are gone by the time it reads on.
    let long = "word ".repeat(100_000);
    fake.push(Reply::Text(long.trim_end().to_owned()));
    fake.push(Reply::Text("tick ".repeat(3_000).trim_end().to_owned()));
    let mut config = config(&fake);
    config.sessions.lane_idle_secs = 1;
    // The long first answer stays in the history: no compaction for it.
    config
        .models
        .context_windows
        .insert("fake/m".into(), 100_000_000);
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let http = reqwest::Client::new();
    let ask = |message: &str, stream: bool| {
        http.post(harness.url("/v1/chat/completions"))
            .bearer_auth(TOKEN)
            .json(&json!({
                "model": "main",
                "stream": stream,
                "messages": [{"role": "user", "content": message}],
            }))
            .send()
    };
    let first = ask("first", true).await.unwrap();
    assert_eq!(first.status(), 200);
    // Not read until the second turn has ended.
    let second = ask("second", false).await.unwrap();
    assert_eq!(second.status(), 200, "{:?}", second.text().await);

    let body = tokio::time::timeout(std::time::Duration::from_secs(60), first.text())
        .await
        .expect("the lagging stream still ends")
        .unwrap();
    assert!(
        body.contains("\"finish_reason\":\"stop\""),
        "{}",
        &body[body.len().saturating_sub(500)..]
    );
    assert!(body.ends_with("data: [DONE]\n\n"));
    let manager = harness.flynn.manager().clone();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while manager.active_lanes() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the lane retires once nobody listens");
    harness.stop().await;
}
