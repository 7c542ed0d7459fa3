//! The `cron.add`, `cron.list` and `cron.remove` tools.

use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::Missed;
use flynn_sessions::LastRun;
use flynn_tools::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::automation::{Automation, from_millis};
use crate::job::{JobError, JobInfo, JobOrigin, NewJob};

pub(crate) struct CronAdd(pub(crate) Automation);
pub(crate) struct CronList(pub(crate) Automation);
pub(crate) struct CronRemove(pub(crate) Automation);

/// Arguments of `cron.add`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddArgs {
    /// Unique name: letters, digits, `-`, `_`, `.` (`morning-brief`).
    pub(crate) name: String,
    /// Cron expression, `minute hour day-of-month month day-of-week`
    /// (`30 7 * * MON-FRI`); at most once a minute.
    pub(crate) schedule: String,
    /// IANA time zone the schedule is read in (`Europe/Berlin`); UTC when
    /// absent.
    #[serde(default)]
    pub(crate) timezone: Option<String>,
    /// What the agent is asked at each run, as you would ask a person.
    pub(crate) message: String,
    /// Where each answer is sent: `here` (this chat) or `<channel>:<peer>`;
    /// kept in the job's session when absent.
    #[serde(default)]
    pub(crate) deliver_to: Option<String>,
    /// The agent that answers; you when absent.
    #[serde(default)]
    pub(crate) agent: Option<String>,
    /// Runs missed while Flynn was down: `skip` (default) or `run_once`.
    #[serde(default)]
    pub(crate) missed: Option<Missed>,
}

/// Arguments of `cron.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {}

/// Arguments of `cron.remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveArgs {
    /// The job's name, as cron.list shows it.
    pub(crate) name: String,
}

pub(crate) fn tool_error(tool: &str, error: JobError) -> ToolError {
    if error.is_bad_input() {
        ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message: error.to_string(),
        }
    } else {
        ToolError::failed(error.to_string())
    }
}

#[async_trait]
impl TypedTool for CronAdd {
    type Args = AddArgs;

    fn name(&self) -> &str {
        "cron.add"
    }

    fn description(&self) -> &str {
        "Schedule a recurring task (a reminder, a daily report): at each time of a cron schedule the agent is sent `message` in the job's own session, and the answer goes to `deliver_to` (`here` for this chat)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// It makes Flynn send messages on its own from now on.
    fn effect(&self) -> ToolEffect {
        ToolEffect::SendsMessages
    }

    async fn run(&self, args: AddArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let new = NewJob {
            name: args.name.trim().to_owned(),
            schedule: args.schedule,
            timezone: args.timezone,
            message: args.message,
            deliver_to: args.deliver_to,
            agent: args.agent,
            missed: args.missed,
        };
        let info = self
            .0
            .add(new, ctx)
            .await
            .map_err(|e| tool_error("cron.add", e))?;
        let mut text = format!(
            "Added cron job '{}': {}.\n{}",
            info.name,
            info.schedule.describe(),
            details(&info)
        );
        if !self.0.is_running() {
            text.push_str(
                "\nThis Flynn process does not run schedules; the daemon runs the job from its next start.",
            );
        }
        Ok(text)
    }
}

#[async_trait]
impl TypedTool for CronList {
    type Args = ListArgs;

    fn name(&self) -> &str {
        "cron.list"
    }

    fn description(&self) -> &str {
        "List the scheduled cron jobs (from the config file and added with cron.add) and the heartbeat: each one's schedule, next run in its time zone, and how its last run went."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, _args: ListArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let jobs = self
            .0
            .jobs()
            .await
            .map_err(|e| tool_error("cron.list", e))?;
        let mut text = if jobs.is_empty() {
            "No cron jobs. Add one with cron.add.\n".to_owned()
        } else {
            let mut text = format!(
                "{} cron job{}:\n",
                jobs.len(),
                if jobs.len() == 1 { "" } else { "s" }
            );
            for info in &jobs {
                let origin = match &info.origin {
                    JobOrigin::Config => {
                        "from the config file (cron.remove cannot remove it)".to_owned()
                    }
                    JobOrigin::Agent { created_by } => format!("added from {created_by}"),
                };
                text.push_str(&format!(
                    "- {}: {}; {origin}\n  {}\n",
                    info.name,
                    info.schedule.describe(),
                    details(info).replace('\n', "\n  ")
                ));
            }
            text
        };
        text.push_str(&self.heartbeat_line().await?);
        Ok(text)
    }
}

impl CronList {
    async fn heartbeat_line(&self) -> Result<String, ToolError> {
        let Some(settings) = &self.0.inner.heartbeat else {
            return Ok("Heartbeat: off (automation.heartbeat.enabled).".to_owned());
        };
        let last = self
            .0
            .heartbeat_last()
            .await
            .map_err(|e| tool_error("cron.list", e))?;
        let mut line = format!(
            "Heartbeat: every {} min, reads {} (times in {}); the agent is asked only when a task there is due.",
            settings.every.as_secs() / 60,
            settings
                .file
                .as_ref()
                .map_or_else(|| "HEARTBEAT.md".to_owned(), |f| f.display().to_string()),
            settings.heartbeat.timezone()
        );
        if let Some(last) = last {
            line.push_str(&format!(
                " Last run {}, {}.",
                settings.heartbeat.local(from_millis(last.scheduled_for)),
                outcome_text(&last)
            ));
        }
        if let Some(to) = &settings.deliver_to {
            line.push_str(&format!(" Answers go to {to}."));
        }
        Ok(line)
    }
}

#[async_trait]
impl TypedTool for CronRemove {
    type Args = RemoveArgs;

    fn name(&self) -> &str {
        "cron.remove"
    }

    fn description(&self) -> &str {
        "Remove a cron job added with cron.add, by name (jobs from the config file are removed there)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// It stops messages Flynn would have sent.
    fn effect(&self) -> ToolEffect {
        ToolEffect::SendsMessages
    }

    async fn run(&self, args: RemoveArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        if ctx.principal.is_guest() {
            return Err(tool_error("cron.remove", JobError::Guest));
        }
        let name = args.name.trim();
        self.0
            .remove(name)
            .await
            .map_err(|e| tool_error("cron.remove", e))?;
        Ok(format!("Removed cron job '{name}'."))
    }
}

/// Next run, last run, who answers and where.
pub(crate) fn details(info: &JobInfo) -> String {
    let next = if !info.enabled {
        "off (enabled: false)".to_owned()
    } else {
        match info.next {
            Some(next) => format!("next run {}", info.schedule.local(next)),
            None => "never runs again".to_owned(),
        }
    };
    let last = match &info.last {
        Some(last) => format!(
            "last run {}, {}",
            info.schedule.local(from_millis(last.scheduled_for)),
            outcome_text(last)
        ),
        None => "never ran".to_owned(),
    };
    let to = match &info.deliver_to {
        Some(to) => format!("answers go to {to}"),
        None => "answers stay in the session".to_owned(),
    };
    format!(
        "{next}; {last}.\nAgent {} in {}; {to}.",
        info.agent, info.session
    )
}

pub(crate) fn outcome_text(last: &LastRun) -> String {
    match &last.error {
        Some(error) => format!("{}: {error}", last.outcome.as_str()),
        None => last.outcome.as_str().to_owned(),
    }
}
