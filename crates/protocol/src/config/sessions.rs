//! Conversation storage and the session lanes.

use super::*;

/// Conversation storage and the session lanes that run turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// Where sessions are stored, as a URL: `sqlite:///path/to/sessions.db`
    /// (or `sqlite://relative/path.db`, relative to the current directory).
    /// Set this or `database`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// SQLite database file; `FLYNN_HOME/sessions.db` when neither this
    /// nor `url` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<PathBuf>,
    /// What start-up does with a turn a previous process left unfinished:
    /// `report` it to its session (no tool runs twice), or `rerun` it.
    #[serde(default)]
    pub interrupted_turns: InterruptedTurns,
    /// Messages that may wait behind a running turn in one session; more
    /// are refused.
    #[serde(default = "default_queue_limit")]
    pub queue_limit: usize,
    /// Seconds a session with nothing to do keeps its lane (its task and
    /// cached state) before the lane is dropped.
    #[serde(default = "default_lane_idle_secs")]
    pub lane_idle_secs: u64,
    /// Days after its last activity a session is deleted, with its
    /// messages, turns and kept tool outputs (usage rows stay), and chat
    /// attachments older than that leave `<workspace>/inbox`; the daemon
    /// prunes at start-up and daily. Unset (the default): kept forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u64>,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            url: None,
            database: None,
            interrupted_turns: InterruptedTurns::default(),
            queue_limit: default_queue_limit(),
            retention_days: None,
            lane_idle_secs: default_lane_idle_secs(),
        }
    }
}

fn default_queue_limit() -> usize {
    32
}

fn default_lane_idle_secs() -> u64 {
    300
}

/// What start-up does with an unfinished turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptedTurns {
    /// Mark it interrupted and tell its session; nothing runs again.
    #[default]
    Report,
    /// Run it again from where its history stands.
    Rerun,
}
