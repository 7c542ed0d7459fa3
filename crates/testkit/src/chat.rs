//! [`MemoryChannel`]: a chat platform in memory, for the tests of what
//! sits on the channel adapter contract (feature `chat`).

// Test support: a step that cannot be done is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flynn_channels::{
    Action, Attachment, Button, Capabilities, ChannelAdapter, ChannelError, Disposition, Inbound,
    InboundEvent, Measure, MessageId, Target,
};
use flynn_protocol::config::{ChannelsConfig, TelegramConfig};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// What the memory adapter was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    Send {
        chat: String,
        id: String,
        text: String,
        buttons: Vec<String>,
    },
    Edit {
        id: String,
        text: String,
        buttons: Vec<String>,
    },
    Answer {
        action: String,
        note: String,
    },
}

/// A chat platform in memory, named `telegram` (so the `telegram` section
/// of a [`ChannelsConfig`] configures it): connects at once, records what
/// it is asked to send, edit and answer, and delivers what a test gives it.
pub struct MemoryChannel {
    max_len: usize,
    out: Mutex<Vec<Out>>,
    changed: Notify,
    sink: watch::Sender<Option<Inbound>>,
}

impl MemoryChannel {
    pub fn new(max_len: usize) -> Arc<Self> {
        Arc::new(MemoryChannel {
            max_len,
            out: Mutex::new(Vec::new()),
            changed: Notify::new(),
            sink: watch::channel(None).0,
        })
    }

    fn record(&self, out: Out) {
        self.out.lock().unwrap().push(out);
        self.changed.notify_waiters();
    }

    pub fn out(&self) -> Vec<Out> {
        self.out.lock().unwrap().clone()
    }

    /// Waits until the record satisfies `done`.
    pub async fn until(&self, done: impl Fn(&[Out]) -> bool) -> Vec<Out> {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let notified = self.changed.notified();
                let out = self.out();
                if done(&out) {
                    return out;
                }
                notified.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out; sent so far: {:#?}", self.out()))
    }

    pub async fn deliver(&self, event: InboundEvent) -> Disposition {
        let mut sink = self.sink.subscribe();
        let sink = sink
            .wait_for(Option::is_some)
            .await
            .unwrap()
            .clone()
            .unwrap();
        sink.deliver(event).await
    }
}

fn labels(buttons: &[Button]) -> Vec<String> {
    buttons
        .iter()
        .map(|b| format!("{}={}", b.label, b.data))
        .collect()
}

#[async_trait]
impl ChannelAdapter for MemoryChannel {
    fn name(&self) -> &str {
        "telegram"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_len: self.max_len,
            measure: Measure::Chars,
            edit: true,
            buttons: true,
            typing: false,
            edit_interval: Duration::from_millis(50),
        }
    }

    fn format(&self, markdown: &str) -> String {
        markdown.to_owned()
    }

    async fn connect(&self, sink: Inbound, stop: CancellationToken) -> Result<(), ChannelError> {
        sink.connected("@memory");
        self.sink.send_replace(Some(sink));
        stop.cancelled().await;
        Ok(())
    }

    async fn send(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        let sends = self
            .out()
            .iter()
            .filter(|o| matches!(o, Out::Send { .. }))
            .count();
        let id = format!("m{sends}");
        self.record(Out::Send {
            chat: to.conversation.chat.clone(),
            id: id.clone(),
            text: text.to_owned(),
            buttons: labels(buttons),
        });
        Ok(MessageId(id))
    }

    async fn edit(
        &self,
        _to: &Target,
        message: &MessageId,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        self.record(Out::Edit {
            id: message.0.clone(),
            text: text.to_owned(),
            buttons: labels(buttons),
        });
        Ok(())
    }

    async fn download(
        &self,
        attachment: &Attachment,
        _limit: u64,
    ) -> Result<bytes::Bytes, ChannelError> {
        Ok(bytes::Bytes::from(attachment.source.clone()))
    }

    async fn answer_action(&self, action: &Action, note: &str) -> Result<(), ChannelError> {
        self.record(Out::Answer {
            action: action.id.clone(),
            note: note.to_owned(),
        });
        Ok(())
    }
}

/// A `channels:` section with only `telegram` (token `1:x`), as
/// `configure` leaves it.
pub fn telegram_channels(configure: impl FnOnce(&mut TelegramConfig)) -> ChannelsConfig {
    let mut config: TelegramConfig =
        serde_json::from_value(serde_json::json!({"bot_token": "1:x"})).unwrap();
    configure(&mut config);
    ChannelsConfig {
        telegram: Some(config),
        ..ChannelsConfig::default()
    }
}
