//! Cron jobs and the heartbeat.

use super::*;

/// Scheduled messages: cron jobs and the heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AutomationConfig {
    /// Cron jobs: each sends its message to an agent on its schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<CronJobConfig>,
    /// A periodic look at `HEARTBEAT.md`; a model is asked only when a task
    /// listed there is due.
    #[serde(default)]
    pub heartbeat: HeartbeatConfig,
    /// Mailboxes watched for new mail: each new message matching a watch's
    /// query is given to its agent (as untrusted content) and the answer
    /// delivered to a chat. One watch or a list.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    #[schemars(with = "Vec<GmailWatchConfig>")]
    pub gmail: Vec<GmailWatchConfig>,
}

/// A cron job: a message sent to an agent on a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronJobConfig {
    /// Unique name (`cron.list` and `cron.remove` use it).
    pub name: String,
    /// Cron expression: 5 fields `minute hour day-of-month month
    /// day-of-week` (`30 7 * * MON-FRI`), or 6 with seconds first.
    pub schedule: String,
    /// IANA time zone the schedule is read in (`Europe/Berlin`).
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// The message sent to the agent.
    pub message: String,
    /// The agent that answers; `agents.default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session (`channel:peer`) the job's turns run in;
    /// `cron:<name>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Where the answer is sent, as a session key `<channel>:<peer>`
    /// (`telegram:123456789`); kept in the job's session only when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<String>,
    /// What happens to runs missed while Flynn was not running.
    #[serde(default)]
    pub missed: Missed,
    /// Off: the job stays in the file but never runs.
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl CronJobConfig {
    /// The session the job's turns run in: `session`, or `cron:<name>`.
    pub fn session_key(&self) -> String {
        self.session
            .clone()
            .unwrap_or_else(|| format!("cron:{}", self.name))
    }
}

/// What happens to scheduled runs missed while Flynn was not running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Missed runs are dropped; the job waits for its next time.
    #[default]
    Skip,
    /// One catch-up run at start-up, however many were missed.
    RunOnce,
}

/// The heartbeat: every `every_mins`, `HEARTBEAT.md` is read and, only when
/// one of its tasks is due, the due tasks are sent to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// On: the file is read every `every_mins`.
    #[serde(default)]
    pub enabled: bool,
    /// Minutes between two looks at the file.
    #[serde(default = "default_heartbeat_mins")]
    pub every_mins: u32,
    /// The task file; `HEARTBEAT.md` in the workspace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// IANA time zone the file's times (`daily 08:00`) are read in.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// Where answers are sent, as a session key `<channel>:<peer>`; kept
    /// in the `heartbeat:main` session only when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<String>,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            enabled: false,
            every_mins: default_heartbeat_mins(),
            file: None,
            timezone: default_timezone(),
            deliver_to: None,
        }
    }
}

fn default_timezone() -> String {
    "UTC".to_owned()
}

fn default_heartbeat_mins() -> u32 {
    30
}

/// A Gmail watch: the mailbox's history is read every `every_secs`; a
/// model is asked only when a new message matches `query`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GmailWatchConfig {
    /// A name for logs and the session (`gmail:<name>`); the account when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The account (an email address signed in with `flynn auth google
    /// login`); `google.account` or the store's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A Gmail search (`from:bank.example`) a new inbox message must match;
    /// every new inbox message when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// What the agent is asked to do with each mail.
    #[serde(default = "default_gmail_instructions")]
    pub instructions: String,
    /// The agent that reads the mail; `agents.default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Where answers are sent, as a session key `<channel>:<peer>`
    /// (`telegram:123456789`).
    pub deliver_to: String,
    /// Seconds between two looks at the mailbox (at least 10).
    #[serde(default = "default_gmail_every_secs")]
    pub every_secs: u32,
}

fn default_gmail_instructions() -> String {
    "A new email arrived. Tell me in two or three sentences who wrote, what they want and whether anything needs doing.".to_owned()
}

fn default_gmail_every_secs() -> u32 {
    60
}

/// A mapping or a list of them (each error names what was wrong inside).
fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping or a list of mappings")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Vec<T>, A::Error> {
            Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Vec<T>, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(|one| vec![one])
        }
    }

    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}
