//! The fakes over real HTTP: their streams have the documented shapes, and
//! they record requests and violations as promised.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use flynn_testkit::{
    FakeAnthropic, FakeBrave, FakeDuckDuckGo, FakeLlamaCpp, FakeOllama, FakeOpenAi, FakeSearxng,
    FakeTavily, Reply, SearchHit, fixtures,
};
use serde_json::{Value, json};

/// One server-sent event: its name (empty when unnamed) and data.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    event: String,
    data: String,
}

/// A small SSE reader: enough for the documented bodies.
fn parse_sse(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = String::new();
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_owned();
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push(value);
                }
            }
            (!data.is_empty()).then(|| Sse {
                event,
                data: data.join("\n"),
            })
        })
        .collect()
}

/// The structure of a JSON value: keys and value types, not the values.
fn shape(value: &Value) -> Value {
    match value {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(_) => json!("number"),
        Value::String(_) => json!("string"),
        Value::Array(items) => Value::Array(items.iter().take(1).map(shape).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
    }
}

/// What kind of event this is: its type, block type and delta type.
fn signature(event: &Sse, data: &Value) -> String {
    let inner = |field: &str| {
        data.get(field)
            .and_then(|v| v.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let choice_delta = data["choices"][0]["delta"]
        .as_object()
        .map(|delta| delta.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    format!(
        "{}|{}|{}|{}|{}",
        event.event,
        data["type"].as_str().unwrap_or(""),
        inner("content_block"),
        inner("delta"),
        choice_delta
    )
}

/// Every shape the documentation shows for each kind of event.
fn documented(bodies: &[&str]) -> BTreeMap<String, Vec<Value>> {
    let mut shapes: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for body in bodies {
        for event in parse_sse(body) {
            let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            shapes
                .entry(signature(&event, &data))
                .or_default()
                .push(shape(&data));
        }
    }
    shapes
}

/// Checks every event of `body` against the documented shapes.
fn assert_documented(body: &str, documented: &BTreeMap<String, Vec<Value>>) {
    for event in parse_sse(body) {
        if event.data == "[DONE]" {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data).unwrap();
        if data["choices"] == json!([]) {
            // The usage chunk: documented in prose ("the choices field will
            // always be an empty array") with the usage object.
            assert_eq!(
                shape(&data["usage"]),
                json!({"prompt_tokens": "number", "completion_tokens": "number", "total_tokens": "number"})
            );
            continue;
        }
        let signature = signature(&event, &data);
        let known = documented
            .get(&signature)
            .unwrap_or_else(|| panic!("no documented event like {signature}: {}", event.data));
        assert!(
            known.contains(&shape(&data)),
            "{signature}: {} has shape {}, documented: {known:?}",
            event.data,
            shape(&data)
        );
    }
}

async fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> (u16, String, String) {
    let mut request = reqwest::Client::new().post(url).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

fn anthropic_request() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "What is the weather like in San Francisco?"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "stream": true
    })
}

const ANTHROPIC_HEADERS: &[(&str, &str)] = &[("anthropic-version", "2023-06-01")];

#[tokio::test]
async fn anthropic_streams_have_the_documented_shapes() {
    let documented = documented(&[
        fixtures::ANTHROPIC_STREAMING_TEXT,
        fixtures::ANTHROPIC_STREAMING_TOOL_USE,
        fixtures::ANTHROPIC_STREAMING_THINKING,
    ]);
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::Text("It is sunny.".into()));
    fake.push(Reply::ToolCalls(vec![(
        "get_weather".into(),
        json!({"location": "San Francisco, CA"}),
    )]));
    fake.push(Reply::Thinking {
        thinking: "Check the forecast.".into(),
        signature: "EqQBCgIYAhIM".into(),
        text: "Sunny.".into(),
    });
    let url = format!("{}/v1/messages", fake.base_url());
    for _ in 0..3 {
        let (status, content_type, body) =
            post(&url, ANTHROPIC_HEADERS, &anthropic_request()).await;
        assert_eq!(
            (status, content_type.as_str()),
            (200, "text/event-stream; charset=utf-8")
        );
        assert_documented(&body, &documented);
        let names: Vec<String> = parse_sse(&body).into_iter().map(|e| e.event).collect();
        assert_eq!(names.first().map(String::as_str), Some("message_start"));
        assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    }
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn anthropic_answers_without_stream_in_one_message() {
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "get_weather".into(),
        json!({"location": "Paris"}),
    )]));
    let mut request = anthropic_request();
    request["stream"] = json!(false);
    let (status, _, body) = post(
        &format!("{}/v1/messages", fake.base_url()),
        ANTHROPIC_HEADERS,
        &request,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 5}
        })
    );
}

#[tokio::test]
async fn openai_streams_have_the_documented_shapes() {
    let documented = documented(&[
        fixtures::OPENAI_STREAMING_TEXT,
        fixtures::OPENAI_STREAMING_TOOL_CALLS,
    ]);
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("It is sunny.".into()));
    fake.push(Reply::ToolCalls(vec![(
        "get_weather".into(),
        json!({"location": "Paris, France"}),
    )]));
    let url = format!("{}/chat/completions", fake.base_url());
    let request = json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "What's the weather like in Paris today?"}],
        "stream": true,
        "stream_options": {"include_usage": true}
    });
    for _ in 0..2 {
        let (status, content_type, body) = post(&url, &[], &request).await;
        assert_eq!(
            (status, content_type.as_str()),
            (200, "text/event-stream; charset=utf-8")
        );
        assert_documented(&body, &documented);
        assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    }
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn openai_answers_without_stream_in_one_completion() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text(
        "Hello there, how may I assist you today?".into(),
    ));
    let (status, _, body) = post(
        &format!("{}/chat/completions", fake.base_url()),
        &[],
        &json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello!"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1694268190,
            "model": "gpt-4o-mini", "system_fingerprint": "fp_44709d6fcb",
            "choices": [{"index": 0, "message": {"role": "assistant",
                "content": "Hello there, how may I assist you today?", "refusal": null},
                "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
        })
    );
}

#[tokio::test]
async fn requests_are_recorded_in_order_and_violations_answered_in_the_vendors_shape() {
    let fake = FakeAnthropic::start_with_key("right").await;
    let url = format!("{}/v1/messages", fake.base_url());

    // A wrong key: the vendor's 401, and no violation.
    let (status, _, body) = post(
        &url,
        &[("x-api-key", "wrong"), ("anthropic-version", "2023-06-01")],
        &anthropic_request(),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
    );
    assert_eq!(fake.violations(), Vec::<String>::new());

    // No version header and no max_tokens: 400 and two violations.
    let mut request = anthropic_request();
    request.as_object_mut().unwrap().remove("max_tokens");
    let (status, _, body) = post(&url, &[("x-api-key", "right")], &request).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "the anthropic-version header is missing"}})
    );

    // A well-formed request with nothing scripted: 500 and a violation.
    let (status, _, _) = post(
        &url,
        &[("x-api-key", "right"), ("anthropic-version", "2023-06-01")],
        &anthropic_request(),
    )
    .await;
    assert_eq!(status, 500);

    assert_eq!(
        fake.violations(),
        vec![
            "the anthropic-version header is missing",
            "max_tokens: Field required (a positive integer)",
            "flynn-testkit: the fake Anthropic server has no scripted reply left for this request (push a Reply first)",
        ]
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].header("x-api-key"), Some("wrong"));
    assert_eq!(requests[1].body.get("max_tokens"), None);
    assert!(
        requests
            .iter()
            .all(|r| r.path == "/v1/messages" && r.method == "POST")
    );
    assert!(
        requests[0]
            .headers
            .iter()
            .all(|(name, _)| *name == name.to_lowercase())
    );
}

#[tokio::test]
async fn openai_flags_a_missing_key_and_unknown_paths() {
    let fake = FakeOpenAi::start_with_key("sk-right").await;
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]});
    let (status, _, _) = post(&format!("{}/chat/completions", fake.base_url()), &[], &body).await;
    assert_eq!(status, 401);
    let (status, _, text) = post(&format!("{}/completions", fake.base_url()), &[], &body).await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["type"],
        json!("invalid_request_error")
    );
    assert_eq!(
        fake.violations(),
        vec![
            "the Authorization header is missing (expected 'Bearer <key>')",
            "unexpected request POST /v1/completions (only POST /v1/chat/completions and GET /v1/models are served)",
        ]
    );
}

#[tokio::test]
async fn ollama_shows_its_models_as_documented() {
    let fake = FakeOllama::start().await;
    fake.add_model("qwen3:8b", 40_960, Some(16_384));
    let root = format!("http://{}", fake.addr());
    let (status, content_type, text) = post(
        &format!("{root}/api/show"),
        &[],
        &json!({"model": "llama3.2"}),
    )
    .await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        serde_json::from_str::<Value>(fixtures::OLLAMA_SHOW).unwrap()
    );
    let (_, _, text) = post(
        &format!("{root}/api/show"),
        &[],
        &json!({"model": "qwen3:8b"}),
    )
    .await;
    let shown: Value = serde_json::from_str(&text).unwrap();
    let documented: Value = serde_json::from_str(fixtures::OLLAMA_SHOW).unwrap();
    assert_eq!(shape(&shown), shape(&documented));
    assert_eq!(shown["model_info"]["llama.context_length"], json!(40_960));
    assert!(
        shown["parameters"]
            .as_str()
            .unwrap()
            .starts_with("num_ctx                        16384\n")
    );
    let (status, _, text) = post(
        &format!("{root}/api/show"),
        &[],
        &json!({"model": "nope:7b"}),
    )
    .await;
    assert_eq!(
        (status, serde_json::from_str::<Value>(&text).unwrap()),
        (404, json!({"error": "model 'nope:7b' not found"}))
    );
    let (status, _, _) = post(
        &format!("{root}/api/show"),
        &[],
        &json!({"name": "llama3.2"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        fake.violations(),
        vec![
            "POST /api/show: the body must name the model as {\"model\": ...}, got {\"name\":\"llama3.2\"}"
        ]
    );
}

#[tokio::test]
async fn llamacpp_props_are_read_only_and_documented() {
    let fake = FakeLlamaCpp::start().await;
    let url = format!("http://{}/props", fake.addr());
    let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        serde_json::from_str::<Value>(fixtures::LLAMACPP_PROPS).unwrap()
    );
    let (status, _, _) = post(&url, &[], &json!({})).await;
    assert_eq!(status, 501);
    assert_eq!(
        fake.violations(),
        vec!["POST /props: the server was not started with --props, so /props is read-only"]
    );
}

/// A SigV4 header of the documented form (the fake does not verify the
/// signature itself).
#[cfg(feature = "bedrock")]
const SIGV4: &[(&str, &str)] = &[
    (
        "authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
    ),
    ("x-amz-date", "20240101T000000Z"),
];

/// What kind of Bedrock event this is: its type and, for deltas, the delta
/// member and its inner member (`contentBlockDelta|reasoningContent.signature`).
#[cfg(feature = "bedrock")]
fn bedrock_signature(kind: &str, payload: &Value) -> String {
    let inner = payload["delta"]
        .as_object()
        .and_then(|delta| delta.iter().next())
        .map(|(member, value)| match value.as_object() {
            Some(map) => format!(
                "{member}.{}",
                map.keys().cloned().collect::<Vec<_>>().join(",")
            ),
            None => member.clone(),
        })
        .unwrap_or_default();
    format!("{kind}|{inner}")
}

#[cfg(feature = "bedrock")]
#[tokio::test]
async fn bedrock_streams_have_the_documented_shapes() {
    use flynn_testkit::FakeBedrock;
    use flynn_testkit::bedrock::{EVENT_STREAM, decode_frames};

    let mut documented: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for fixture in [
        fixtures::BEDROCK_STREAM_TEXT,
        fixtures::BEDROCK_STREAM_TOOL_USE,
        fixtures::BEDROCK_STREAM_REASONING,
    ] {
        let events: Vec<Value> = serde_json::from_str(fixture).unwrap();
        for event in events {
            let (kind, payload) = event.as_object().unwrap().iter().next().unwrap();
            documented
                .entry(bedrock_signature(kind, payload))
                .or_default()
                .push(shape(payload));
        }
    }
    let fake = FakeBedrock::start().await;
    fake.push(Reply::Text("It is sunny.".into()));
    fake.push(Reply::ToolCalls(vec![(
        "top_song".into(),
        json!({"sign": "WZPZ"}),
    )]));
    fake.push(Reply::Thinking {
        thinking: "Check the charts.".into(),
        signature: "EqoBCkgIARAB".into(),
        text: "Elemental Hotel.".into(),
    });
    let url = format!(
        "{}/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
        fake.endpoint_url()
    );
    let request: Value = serde_json::from_str(fixtures::BEDROCK_TOOL_USE_REQUEST).unwrap();
    for _ in 0..3 {
        let mut post = reqwest::Client::new().post(&url).json(&request);
        for (name, value) in SIGV4 {
            post = post.header(*name, *value);
        }
        let response = post.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            EVENT_STREAM
        );
        let frames = decode_frames(&response.bytes().await.unwrap()).unwrap();
        let kinds: Vec<&str> = frames
            .iter()
            .map(|f| f.header(":event-type").unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"messageStart"));
        assert_eq!(kinds[kinds.len() - 2..], ["messageStop", "metadata"]);
        for frame in &frames {
            assert_eq!(
                (frame.header(":message-type"), frame.header(":content-type")),
                (Some("event"), Some("application/json"))
            );
            let mut payload: Value = serde_json::from_slice(&frame.payload).unwrap();
            // The padding the service adds to every event.
            assert!(payload.as_object_mut().unwrap().remove("p").is_some());
            let kind = frame.header(":event-type").unwrap();
            let signature = bedrock_signature(kind, &payload);
            let known = documented
                .get(&signature)
                .unwrap_or_else(|| panic!("no documented event like {signature}: {payload}"));
            // The fake adds no cache counts to its usage.
            let mut documented_shapes = known.clone();
            for shape in &mut documented_shapes {
                if let Some(usage) = shape.get_mut("usage").and_then(Value::as_object_mut) {
                    usage.remove("cacheReadInputTokens");
                    usage.remove("cacheWriteInputTokens");
                }
            }
            assert!(
                documented_shapes.contains(&shape(&payload)),
                "{signature}: {payload} has shape {}, documented: {known:?}",
                shape(&payload)
            );
        }
    }
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[cfg(feature = "bedrock")]
#[tokio::test]
async fn bedrock_takes_the_documented_requests_and_answers_converse_in_one_message() {
    use flynn_testkit::FakeBedrock;

    let fake = FakeBedrock::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "top_song".into(),
        json!({"sign": "WZPZ"}),
    )]));
    fake.push(Reply::Text(
        "The most popular song on WZPZ is Elemental Hotel by 8 Storey Hike.".into(),
    ));
    let url = format!(
        "{}/model/amazon.nova-lite-v1:0/converse",
        fake.endpoint_url()
    );
    let documented: Value = serde_json::from_str(fixtures::BEDROCK_TOOL_USE_RESPONSE).unwrap();

    let request: Value = serde_json::from_str(fixtures::BEDROCK_TOOL_USE_REQUEST).unwrap();
    let (status, _, body) = post(&url, SIGV4, &request).await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shape(&answer["output"]), shape(&documented["output"]));
    assert_eq!(answer["stopReason"], documented["stopReason"]);
    assert_eq!(
        answer["output"]["message"]["content"][0]["toolUse"],
        json!({"toolUseId": "tooluse_01", "name": "top_song", "input": {"sign": "WZPZ"}})
    );

    let request: Value = serde_json::from_str(fixtures::BEDROCK_TOOL_RESULT_REQUEST).unwrap();
    let (status, _, body) = post(&url, SIGV4, &request).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({
            "output": {"message": {"role": "assistant", "content": [
                {"text": "The most popular song on WZPZ is Elemental Hotel by 8 Storey Hike."}
            ]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17},
            "metrics": {"latencyMs": 42}
        })
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[cfg(feature = "bedrock")]
#[tokio::test]
async fn bedrock_flags_an_unsigned_request_in_the_aws_error_shape() {
    use flynn_testkit::FakeBedrock;

    let fake = FakeBedrock::start().await;
    let url = format!(
        "{}/model/amazon.nova-lite-v1:0/converse",
        fake.endpoint_url()
    );
    let request: Value = serde_json::from_str(fixtures::BEDROCK_TOOL_USE_REQUEST).unwrap();
    let (status, content_type, body) = post(&url, &[], &request).await;
    assert_eq!((status, content_type.as_str()), (403, "application/json"));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"message": "Authorization: not an AWS4-HMAC-SHA256 signature (got \"\")"})
    );
    assert_eq!(
        fake.violations(),
        vec!["Authorization: not an AWS4-HMAC-SHA256 signature (got \"\")"]
    );
}

/// Sends a request and returns (status, body).
async fn send(request: reqwest::RequestBuilder) -> (u16, String) {
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn search_hits() -> Vec<SearchHit> {
    vec![
        SearchHit::new("One", "https://one.example/", "first <b>hit</b>"),
        SearchHit::new("Two", "https://two.example/?a=1&b=2", "second hit"),
    ]
}

#[tokio::test]
async fn search_fakes_answer_good_requests_in_the_documented_shapes() {
    let client = reqwest::Client::new();

    let brave = FakeBrave::start("key").await;
    brave.set_hits(search_hits());
    let (status, body) = send(
        client
            .get(format!("{}/res/v1/web/search", brave.base_url()))
            .query(&[("q", "rust"), ("count", "1")])
            .header("X-Subscription-Token", "key"),
    )
    .await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["query"]["original"], "rust");
    assert_eq!(
        body["web"]["results"],
        json!([{"type": "search_result", "title": "One", "url": "https://one.example/",
            "description": "first <b>hit</b>", "is_source_local": false, "language": "en"}])
    );
    assert_eq!(brave.violations(), Vec::<String>::new());

    let searxng = FakeSearxng::start().await;
    searxng.set_hits(search_hits());
    let (status, body) = send(
        client
            .get(format!("{}/search", searxng.base_url()))
            .query(&[("q", "rust"), ("format", "json")]),
    )
    .await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 200);
    let results: Vec<(&str, &str, &str)> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["title"].as_str().unwrap(),
                r["url"].as_str().unwrap(),
                r["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("One", "https://one.example/", "first <b>hit</b>"),
            ("Two", "https://two.example/?a=1&b=2", "second hit")
        ]
    );
    assert_eq!(searxng.violations(), Vec::<String>::new());

    let tavily = FakeTavily::start("tvly").await;
    tavily.set_hits(search_hits());
    let (status, body) = send(
        client
            .post(format!("{}/search", tavily.base_url()))
            .bearer_auth("tvly")
            .json(&json!({"query": "rust", "max_results": 1})),
    )
    .await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        body["results"],
        json!([{"title": "One", "url": "https://one.example/", "content": "first <b>hit</b>",
            "score": 0.8, "raw_content": null}])
    );
    assert_eq!(tavily.violations(), Vec::<String>::new());

    let duckduckgo = FakeDuckDuckGo::start().await;
    duckduckgo.set_hits(search_hits());
    let (status, page) = send(
        client
            .post(format!("{}/html/", duckduckgo.base_url()))
            .form(&[("q", "rust")]),
    )
    .await;
    assert_eq!(status, 200);
    assert!(page.contains(
        "<a rel=\"nofollow\" class=\"result__a\" \
         href=\"//duckduckgo.com/l/?uddg=https%3A%2F%2Ftwo.example%2F%3Fa%3D1%26b%3D2&amp;rut=0123abcd\">Two</a>"
    ));
    assert!(page.contains("<a class=\"result__snippet\""));
    assert!(page.contains("first &lt;b&gt;hit&lt;/b&gt;"));
    assert!(page.contains("result--ad"));
    assert_eq!(duckduckgo.violations(), Vec::<String>::new());
    assert_eq!(
        duckduckgo.requests()[0].form(),
        [("q".to_owned(), "rust".to_owned())]
    );
}

#[tokio::test]
async fn search_fakes_answer_bad_requests_like_the_services_and_list_them() {
    let client = reqwest::Client::new();

    let brave = FakeBrave::start("key").await;
    let url = format!("{}/res/v1/web/search", brave.base_url());
    let code = |body: &str| -> (String, Value) {
        let body: Value = serde_json::from_str(body).unwrap();
        (
            body["error"]["code"].as_str().unwrap().to_owned(),
            body["error"]["meta"]["errors"][0]["loc"].clone(),
        )
    };
    let (status, body) = send(client.get(&url).query(&[("q", "rust")])).await;
    assert_eq!(
        (status, code(&body)),
        (
            422,
            (
                "VALIDATION".into(),
                json!(["header", "x-subscription-token"])
            )
        )
    );
    let (status, body) = send(
        client
            .get(&url)
            .query(&[("q", "rust")])
            .header("X-Subscription-Token", "wrong"),
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (422, ("SUBSCRIPTION_TOKEN_INVALID".into(), Value::Null))
    );
    let (status, body) = send(client.get(&url).header("X-Subscription-Token", "key")).await;
    assert_eq!(
        (status, code(&body)),
        (422, ("VALIDATION".into(), json!(["query", "q"])))
    );
    let (status, _) = send(client.post(&url).header("X-Subscription-Token", "key")).await;
    assert_eq!(status, 405);
    assert_eq!(
        brave.violations(),
        [
            "the X-Subscription-Token header is missing",
            "the q parameter is missing or empty",
            "POST /res/v1/web/search (the web search endpoint is GET)",
        ]
    );

    let searxng = FakeSearxng::start().await;
    let url = format!("{}/search", searxng.base_url());
    let (status, page) = send(client.get(&url).query(&[("q", "rust")])).await;
    assert_eq!(status, 200);
    assert!(page.starts_with("<!doctype html>"));
    let (status, body) = send(client.get(&url).query(&[("format", "json")])).await;
    assert_eq!((status, body.as_str()), (400, r#"{"error":"No query"}"#));
    assert_eq!(
        searxng.violations(),
        [
            "format=json is missing: SearXNG answers with its HTML page",
            "the q parameter is missing or empty",
        ]
    );

    let tavily = FakeTavily::start("tvly").await;
    let url = format!("{}/search", tavily.base_url());
    let unauthorized = r#"{"detail":{"error":"Unauthorized: missing or invalid API key."}}"#;
    let (status, body) = send(client.post(&url).json(&json!({"query": "rust"}))).await;
    assert_eq!((status, body.as_str()), (401, unauthorized));
    let (status, body) = send(
        client
            .post(&url)
            .bearer_auth("wrong")
            .json(&json!({"query": "rust"})),
    )
    .await;
    assert_eq!((status, body.as_str()), (401, unauthorized));
    let (status, _) = send(
        client
            .post(&url)
            .bearer_auth("tvly")
            .json(&json!({"q": "rust"})),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = send(client.get(&url).bearer_auth("tvly")).await;
    assert_eq!(status, 405);
    assert_eq!(
        tavily.violations(),
        [
            "the Authorization header is missing (expected 'Bearer <key>')",
            "the body has no 'query' string",
            "GET /search (Tavily's search is POST)",
        ]
    );

    let duckduckgo = FakeDuckDuckGo::start().await;
    let url = format!("{}/html/", duckduckgo.base_url());
    let (status, page) = send(client.get(&url).query(&[("q", "rust")])).await;
    assert_eq!(status, 200);
    assert!(page.contains("<form action=\"/html/\""), "{page}");
    assert_eq!(
        duckduckgo.violations(),
        [
            "GET /html/ (the form posts the query: POST with q in the body)",
            "the form field q is missing or empty",
        ]
    );
}

#[tokio::test]
async fn search_fakes_answer_a_pushed_error_once() {
    let searxng = FakeSearxng::start().await;
    searxng.push_error(502, "<h1>Bad Gateway</h1>");
    let url = format!("{}/search", searxng.base_url());
    let client = reqwest::Client::new();
    let query = [("q", "rust"), ("format", "json")];
    assert_eq!(
        send(client.get(&url).query(&query)).await,
        (502, "<h1>Bad Gateway</h1>".to_owned())
    );
    let (status, _) = send(client.get(&url).query(&query)).await;
    assert_eq!(status, 200);
    assert_eq!(searxng.violations(), Vec::<String>::new());
}
