use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{SessionKey, Usage};

/// The life cycle of one agent run (a turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Start,
    CancelRequested,
    Cancelled,
    Complete,
    Error,
}

impl RunState {
    /// Whether the run has ended (completed, cancelled or failed): no
    /// event of it follows this one.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Complete | RunState::Cancelled | RunState::Error
        )
    }
}

/// Identifies one accepted inbound message and the turn that answers it.
/// Assigned by the session store when the message is accepted; never
/// reused, and stable across restarts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct TurnId(pub u64);

impl std::fmt::Display for TurnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a tool does to the world, as the tool declares it. Policies and
/// approvers decide by it; ordered from least to most risky.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolEffect {
    /// Only reads (files, state); safe to run in parallel.
    ReadOnly,
    /// Reaches the network.
    Network,
    /// Creates, changes or deletes files.
    WritesFiles,
    /// Sends a message to someone (a chat, another agent's session).
    SendsMessages,
    /// Runs programs, which may do anything the user can.
    RunsProcesses,
    /// Changes Flynn's own memory files (`memory.write`): not asked about
    /// under `supervised` autonomy, but hidden at `read_only` and asked
    /// about once untrusted content is in the turn, like the risky ones.
    WritesMemory,
    /// Acts through a tool server Flynn does not know the inside of (an
    /// MCP tool that does not declare itself read-only): may change
    /// anything that server can reach, so it is treated like running a
    /// program.
    External,
    /// Acts in one of the owner's online accounts: sends mail, or creates,
    /// changes or deletes events, documents, files, tasks or labels. Asks
    /// first at every autonomy level (unless a hook rule names the tool),
    /// and only a person may approve it once untrusted content is in the
    /// session.
    ActsOnAccount,
}

impl ToolEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolEffect::ReadOnly => "read_only",
            ToolEffect::Network => "network",
            ToolEffect::WritesFiles => "writes_files",
            ToolEffect::SendsMessages => "sends_messages",
            ToolEffect::RunsProcesses => "runs_processes",
            ToolEffect::WritesMemory => "writes_memory",
            ToolEffect::External => "external",
            ToolEffect::ActsOnAccount => "acts_on_account",
        }
    }

    /// Whether the effect changes something outside Flynn (files,
    /// processes, other people's inboxes): what `supervised` autonomy asks
    /// about.
    pub fn is_risky(self) -> bool {
        matches!(
            self,
            ToolEffect::WritesFiles
                | ToolEffect::SendsMessages
                | ToolEffect::RunsProcesses
                | ToolEffect::External
                | ToolEffect::ActsOnAccount
        )
    }

    /// Whether the effect outlives the turn: the risky effects, and
    /// writing memory (which a later turn reads back as instructions).
    /// What `read_only` autonomy hides and untrusted content gates.
    pub fn changes_state(self) -> bool {
        self.is_risky() || self == ToolEffect::WritesMemory
    }
}

/// How a confirmation request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    Approved,
    Denied,
    /// Nobody answered within `tools.confirm_timeout_secs`: denied.
    TimedOut,
    /// The turn was cancelled while waiting.
    Cancelled,
}

/// What start-up did with a turn that a previous process left unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// The turn was marked interrupted and the session told so.
    Reported,
    /// The turn is run again.
    Rerun,
}

/// Stable error codes carried by `AgentEvent::Error` and JSON output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Invalid configuration or arguments.
    Config,
    /// The model provider failed after retries and fallback.
    Provider,
    /// The session store failed.
    Storage,
    /// The run was cancelled.
    Cancelled,
    /// The request was refused before it was accepted (unknown agent,
    /// a full queue, a bad argument).
    Refused,
    /// Anything else.
    Internal,
}

/// One tool call of a finished turn, for summaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallSummary {
    pub name: String,
    pub ok: bool,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnOutcome {
    /// The final answer text.
    pub reply: String,
    /// The provider and model that produced the final answer.
    pub provider: String,
    pub model: String,
    /// Usage summed over every model call of the turn.
    pub usage: Usage,
    /// What the turn's model calls cost in USD, when their prices are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub tool_calls: Vec<ToolCallSummary>,
    /// Set when the turn stopped early (say, at `max_iterations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Where the turn's time went (absent for chat commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<TurnTiming>,
}

/// Where a turn's time went, in microseconds. What the turn took beyond
/// these is Flynn's own work (prompt, storage, events): its overhead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnTiming {
    /// Each model call of the conversation, from the request to the
    /// complete answer (fallbacks and retries included).
    pub model_calls_us: Vec<u64>,
    /// Running tools, confirmations included.
    pub tools_us: u64,
    /// Compacting the history (its summariser calls included).
    pub compaction_us: u64,
}

impl TurnTiming {
    /// Time spent waiting on models, tools and compaction.
    pub fn waiting_us(&self) -> u64 {
        self.model_calls_us
            .iter()
            .sum::<u64>()
            .saturating_add(self.tools_us)
            .saturating_add(self.compaction_us)
    }
}

impl TurnOutcome {
    /// The outcome of a chat command: its reply, no model, no usage.
    pub fn command_reply(reply: impl Into<String>) -> Self {
        TurnOutcome {
            reply: reply.into(),
            provider: String::new(),
            model: String::new(),
            usage: Usage::default(),
            cost_usd: None,
            tool_calls: Vec::new(),
            warning: None,
            timing: None,
        }
    }
}

/// What an agent run reports while it works, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    RunState {
        state: RunState,
    },
    /// A piece of answer text, as it streams.
    ContentDelta {
        text: String,
    },
    /// A piece of the model's reasoning.
    Thinking {
        text: String,
    },
    ToolStart {
        id: String,
        name: String,
        input: Value,
    },
    ToolEnd {
        id: String,
        name: String,
        ok: bool,
        /// The output as fed to the model (already truncated).
        output: String,
    },
    /// Something the user should know that does not end the run.
    Warning {
        message: String,
    },
    Done {
        outcome: TurnOutcome,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    /// The message was accepted and waits behind `ahead` turns of its
    /// session.
    Queued {
        ahead: u32,
    },
    /// A tool call waits for a person's approval.
    ConfirmationRequested {
        /// The tool call's id.
        id: String,
        name: String,
        input: Value,
        effect: ToolEffect,
        /// Seconds before an unanswered request is denied.
        timeout_secs: u64,
        /// Why this call asks when its hook and autonomy alone would not,
        /// e.g. "untrusted content from web.fetch is in this turn".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    ConfirmationResolved {
        id: String,
        resolution: Resolution,
    },
    /// The history was compacted: older messages replaced by a summary.
    Compaction {
        /// Messages replaced.
        replaced: u64,
        /// Estimated tokens of the history before and after.
        tokens_before: u64,
        tokens_after: u64,
        /// The summary came from the deterministic fallback, not a model.
        fallback: bool,
    },
    /// A turn that a previous process left unfinished (a crash, a kill)
    /// was found at start-up.
    Interrupted {
        /// The interrupted turn, which is also the envelope's `turn`. Named
        /// apart on the wire: the envelope's fields and the event's share
        /// one JSON object, where two `turn` keys could not be read back.
        #[serde(rename = "interrupted_turn")]
        turn: TurnId,
        action: RecoveryAction,
        /// What the session is told, e.g. which message was cut short.
        message: String,
    },
    /// A chat command (`/status`, `/model`...) was answered without the
    /// model.
    Command {
        name: String,
        reply: String,
    },
    /// The turn sends its chat a file (`media.send`, `voice.say`): chat
    /// channels deliver it natively, the web chat shows it.
    Media {
        file: MediaFile,
    },
}

/// A file a turn sent to its chat, as the runtime keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MediaFile {
    /// Where the runtime keeps a copy: the gateway serves it at
    /// `/media/<id>` to clients that may read the session.
    pub id: String,
    /// The file name shown (`chart.png`).
    pub name: String,
    /// MIME type (`image/png`).
    pub media_type: String,
    /// Bytes.
    pub size: u64,
    pub kind: MediaKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
}

/// How a sent file is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// A picture shown inline.
    Image,
    /// A file to download.
    #[default]
    Document,
    /// A sound or music file with a player.
    Audio,
    /// A voice note.
    Voice,
}

impl MediaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Document => "document",
            MediaKind::Audio => "audio",
            MediaKind::Voice => "voice",
        }
    }
}

/// One event as subscribers receive it: what happened, to which session
/// and turn, in which order, when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventEnvelope {
    pub session: SessionKey,
    /// The turn the event belongs to; `None` for session-level events
    /// (a command reply, a recovery report without a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    /// Increases by one with every event of this session for as long as
    /// anyone is subscribed to it; a gap means events were skipped.
    pub seq: u64,
    /// Unix milliseconds.
    pub time_ms: i64,
    #[serde(flatten)]
    pub event: AgentEvent,
}

/// A subscriber fell behind and this many events were dropped for it.
/// The turn never waits for a subscriber; see `docs/ARCHITECTURE.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Lagged {
    pub skipped: u64,
}

impl std::fmt::Display for Lagged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} events were skipped (the subscriber fell behind)",
            self.skipped
        )
    }
}

impl std::error::Error for Lagged {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_kind_of_envelope_reads_back_as_it_was_written() {
        let session: SessionKey = "web:ann".parse().unwrap();
        let events = [
            AgentEvent::Interrupted {
                turn: TurnId(7),
                action: RecoveryAction::Reported,
                message: "cut short".to_owned(),
            },
            AgentEvent::ContentDelta {
                text: "hi".to_owned(),
            },
            AgentEvent::Command {
                name: "status".to_owned(),
                reply: "ok".to_owned(),
            },
            AgentEvent::Media {
                file: MediaFile {
                    id: "0190f1a2b3c4".to_owned(),
                    name: "chart.png".to_owned(),
                    media_type: "image/png".to_owned(),
                    size: 1234,
                    kind: MediaKind::Image,
                    caption: Some("the chart".to_owned()),
                },
            },
        ];
        for event in events {
            for turn in [Some(TurnId(7)), None] {
                let envelope = EventEnvelope {
                    session: session.clone(),
                    turn,
                    seq: 3,
                    time_ms: 1_000,
                    event: event.clone(),
                };
                let json = serde_json::to_string(&envelope).unwrap();
                let back: EventEnvelope = serde_json::from_str(&json)
                    .unwrap_or_else(|e| panic!("{json} does not read back: {e}"));
                assert_eq!(back, envelope, "{json}");
            }
        }
    }
}
