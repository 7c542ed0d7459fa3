use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flynn_api::{Approval, Notification, SendParams};
use flynn_client::Client;
use flynn_core::protocol::config::{
    FlynnConfig, HookAction, HookRule, ProviderConfig, ProviderKind, TiersConfig,
};
use flynn_core::protocol::{AgentEvent, EventEnvelope, SessionKey};
use flynn_core::{Flynn, Tool};
use flynn_gateway::{Gateway, GatewayExtras, GatewayParts, RemoteApprover, Serving};
use flynn_testkit::FakeOpenAi;
use futures::StreamExt;
use jsonrpsee::core::client::{ClientT, Subscription, SubscriptionClientT};
use jsonrpsee::http_client::{HttpClient, HttpClientBuilder};
use jsonrpsee::ws_client::{WsClient, WsClientBuilder};
use serde_json::{Value, json};

pub const TOKEN: &str = "test-token-0123456789";

pub fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

pub fn config(fake: &FakeOpenAi) -> FlynnConfig {
    let mut config = FlynnConfig::default();
    let mut provider = ProviderConfig::new(ProviderKind::OpenaiCompatible);
    provider.base_url = Some(fake.base_url());
    config.providers.insert("fake".into(), provider);
    config.models.tiers = TiersConfig {
        default: vec!["fake/m".parse().unwrap()],
        fast: vec!["fake/small".parse().unwrap()],
        ..TiersConfig::default()
    };
    config.memory.enabled = false;
    config
}

/// A gateway on a runtime, on 127.0.0.1.
pub struct Harness {
    pub flynn: Flynn,
    pub serving: Option<Serving>,
    pub addr: SocketAddr,
    pub _home: tempfile::TempDir,
}

pub struct Options {
    pub config: FlynnConfig,
    pub tools: Vec<Arc<dyn Tool>>,
    pub config_file: Option<std::path::PathBuf>,
}

impl Harness {
    pub async fn start(fake: &FakeOpenAi) -> Harness {
        Harness::with(Options {
            config: config(fake),
            tools: Vec::new(),
            config_file: None,
        })
        .await
    }

    pub async fn with(options: Options) -> Harness {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Harness::on(listener, options).await
    }

    /// A harness serving on `listener` (bound before the config is
    /// written, when the config must name the gateway's own address).
    pub async fn on(listener: tokio::net::TcpListener, options: Options) -> Harness {
        install_crypto();
        let home = tempfile::tempdir().unwrap();
        let mut builder = Flynn::builder()
            .config(options.config.clone())
            // FLYNN_HOME inside the workspace, where file tools cannot reach.
            .home(home.path().join("data"))
            .workspace(home.path());
        for tool in options.tools {
            builder = builder.tool_dyn(tool);
        }
        let flynn = builder.build().await.unwrap();
        // Composed as the daemon composes it.
        let gateway = Gateway::with_extras(
            GatewayParts {
                manager: flynn.manager().clone(),
                config: options.config,
                config_file: options.config_file,
                token: TOKEN.to_owned(),
                approver: RemoteApprover::new(),
                channels: None,
            },
            GatewayExtras {
                mcp: flynn.mcp().clone(),
                memory: flynn.memory().cloned(),
                transcriber: flynn.transcriber().cloned(),
            },
        );
        let serving = gateway.serve(listener).unwrap();
        let addr = serving.local_addr();
        Harness {
            flynn,
            serving: Some(serving),
            addr,
            _home: home,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn ws(&self) -> WsClient {
        let mut headers = jsonrpsee::http_client::HeaderMap::new();
        headers.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        WsClientBuilder::default()
            .set_headers(headers)
            .build(format!("ws://{}/rpc", self.addr))
            .await
            .unwrap()
    }

    /// A typed client with the owner's token, as the CLI and the TUI
    /// connect.
    pub async fn client(&self) -> flynn_client::Client {
        flynn_client::Client::connect(&format!("ws://{}/rpc", self.addr), Some(TOKEN))
            .await
            .unwrap()
    }

    pub fn http(&self) -> HttpClient {
        let mut headers = jsonrpsee::http_client::HeaderMap::new();
        headers.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        HttpClientBuilder::default()
            .set_headers(headers)
            .build(self.url("/rpc"))
            .unwrap()
    }

    pub async fn stop(&mut self) {
        if let Some(serving) = self.serving.take() {
            self.flynn.shutdown().await;
            serving.shutdown(Duration::from_secs(2)).await;
        }
    }
}

/// Params as one object.
pub fn params(value: Value) -> jsonrpsee::core::params::ObjectParams {
    let mut params = jsonrpsee::core::params::ObjectParams::new();
    if let Value::Object(map) = value {
        for (key, value) in map {
            params.insert(&key, value).unwrap();
        }
    }
    params
}

/// Starts `agent.send` and collects its notifications until the turn ends.
pub async fn send(client: &WsClient, body: Value) -> Vec<Value> {
    let mut sub: Subscription<Value> = client
        .subscribe("agent.send", params(body), "agent.unsubscribe")
        .await
        .unwrap();
    collect_turn(&mut sub).await
}

pub async fn collect_turn(sub: &mut Subscription<Value>) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("the turn ended in time")
            .expect("the stream went on")
            .unwrap();
        let event = next.clone();
        events.push(next);
        let state = event["state"].as_str().unwrap_or_default();
        if (event["type"] == "run_state" && ["complete", "cancelled", "error"].contains(&state))
            || (event["type"] == "command")
        {
            return events;
        }
    }
}

pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let event = e;
            match event["type"].as_str().unwrap_or("?") {
                "run_state" => format!("run_state:{}", event["state"].as_str().unwrap()),
                other => other.to_owned(),
            }
        })
        .collect()
}

pub fn text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "content_delta")
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect()
}

pub async fn call(client: &impl ClientT, method: &str, body: Value) -> Value {
    client.request(method, params(body)).await.unwrap()
}

/// A tool hook rule asking for confirmation.
pub fn confirm(tool: &str) -> HookRule {
    HookRule {
        tool: tool.to_owned(),
        action: HookAction::Confirm,
    }
}

pub fn empty() -> Value {
    json!({})
}

/// `agent.send` with everything else at its default.
pub fn send_params(session: &SessionKey, message: &str) -> SendParams {
    SendParams {
        session: session.clone(),
        message: message.into(),
        tier: None,
        model: None,
        agent: None,
        approval: Approval::Ask,
    }
}

pub fn key(text: &str) -> SessionKey {
    text.parse().unwrap()
}

/// Follows one turn to its end (each event within 10 s).
pub async fn follow(client: &Client, params: SendParams) -> Vec<EventEnvelope> {
    let mut turn = client.follow(&params).await.unwrap();
    let mut events = Vec::new();
    while let Some(next) = tokio::time::timeout(Duration::from_secs(10), turn.next())
        .await
        .expect("the turn went on in time")
    {
        match next.unwrap() {
            Notification::Event(envelope) => events.push(*envelope),
            Notification::Lagged { skipped, .. } => panic!("lagged by {skipped}"),
        }
    }
    events
}

/// A session watcher's events up to and including the end of a turn.
pub async fn until_turn_ends(
    watched: &mut flynn_client::Notifications<Notification>,
) -> Vec<EventEnvelope> {
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), watched.next())
            .await
            .expect("the turn went on in time")
            .expect("the subscription is open")
            .unwrap();
        let Notification::Event(envelope) = next else {
            panic!("lagged: {next:?}");
        };
        let last = matches!(envelope.event, AgentEvent::RunState { state } if state.is_terminal());
        events.push(*envelope);
        if last {
            return events;
        }
    }
}

pub fn text_of(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .filter_map(|envelope| match &envelope.event {
            AgentEvent::ContentDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
