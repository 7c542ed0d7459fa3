//! `tasks.*`: list, add and complete Google Tasks.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::GoogleService;
use flynn_tools::{ToolContext, ToolError, TypedTool};
use reqwest::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{TIMEOUT, segment};
use crate::Google;
use crate::client::Call;

const TASKS: GoogleService = GoogleService::Tasks;

#[derive(Debug, Deserialize)]
struct Task {
    id: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    notes: Option<String>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    due: Option<String>,
}

fn show(task: &Task) -> String {
    let mut line = format!(
        "- [{}] {}",
        if task.status == "completed" { "x" } else { " " },
        task.title
    );
    if let Some(due) = &task.due {
        line.push_str(&format!(" · due {}", due.get(..10).unwrap_or(due)));
    }
    line.push_str(&format!(" [id {}]", task.id));
    if let Some(notes) = task.notes.as_deref().filter(|n| !n.trim().is_empty()) {
        line.push_str(&format!("\n  {}", notes.trim()));
    }
    line
}

/// The list's id: `@default` (the owner's first list) or one named.
async fn list_id(
    google: &Google,
    account: Option<&str>,
    list: Option<&str>,
) -> Result<String, ToolError> {
    #[derive(Deserialize)]
    struct Lists {
        #[serde(default)]
        items: Vec<List>,
    }
    #[derive(Deserialize)]
    struct List {
        id: String,
        title: String,
    }
    let Some(wanted) = list.map(str::trim).filter(|l| !l.is_empty()) else {
        return Ok("@default".to_owned());
    };
    let lists: Lists = google
        .json(
            account,
            TASKS,
            &Call::get(format!("{}/users/@me/lists", google.endpoints().tasks)),
        )
        .await?;
    lists
        .items
        .iter()
        .find(|l| l.id == wanted || l.title.eq_ignore_ascii_case(wanted))
        .map(|l| l.id.clone())
        .ok_or_else(|| {
            let names: Vec<&str> = lists.items.iter().map(|l| l.title.as_str()).collect();
            ToolError::failed(format!(
                "no task list named '{wanted}' (lists: {})",
                names.join(", ")
            ))
        })
}

/// `tasks.list`.
#[derive(Debug)]
pub struct TasksList(pub Arc<Google>);

/// Arguments of `tasks.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksListArgs {
    /// The list's name; the default list when absent.
    list: Option<String>,
    /// Also the completed tasks.
    #[serde(default)]
    completed: bool,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for TasksList {
    type Args = TasksListArgs;

    fn name(&self) -> &str {
        "tasks.list"
    }

    fn description(&self) -> &str {
        "List the owner's Google Tasks (open ones by default), each with its id and due date."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn untrusted_output(&self) -> bool {
        // Tasks can be made from mail and shared documents.
        true
    }

    async fn run(&self, args: TasksListArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Page {
            #[serde(default)]
            items: Vec<Task>,
            next_page_token: Option<String>,
        }
        let google = &self.0;
        let account = args.account.as_deref();
        let list = list_id(google, account, args.list.as_deref()).await?;
        let mut tasks = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let got: Page = google
                .json(
                    account,
                    TASKS,
                    &Call::get(format!(
                        "{}/lists/{}/tasks",
                        google.endpoints().tasks,
                        segment(&list)
                    ))
                    .query("showCompleted", args.completed)
                    .query("showHidden", args.completed)
                    .query("maxResults", 100)
                    .query_opt("pageToken", page.as_deref()),
                )
                .await?;
            tasks.extend(got.items);
            page = got.next_page_token;
            if page.is_none() || tasks.len() >= 500 {
                break;
            }
        }
        if tasks.is_empty() {
            return Ok("No tasks.".to_owned());
        }
        Ok(tasks.iter().map(show).collect::<Vec<_>>().join("\n") + "\n")
    }
}

/// `tasks.add`.
#[derive(Debug)]
pub struct TasksAdd(pub Arc<Google>);

/// Arguments of `tasks.add`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksAddArgs {
    /// What to do.
    title: String,
    /// More words about it.
    notes: Option<String>,
    /// The day it is due (`2026-11-29`).
    due: Option<String>,
    /// The list's name; the default list when absent.
    list: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for TasksAdd {
    type Args = TasksAddArgs;

    fn name(&self) -> &str {
        "tasks.add"
    }

    fn description(&self) -> &str {
        "Add a task to the owner's Google Tasks, with notes and a due day."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ActsOnAccount
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, args: TasksAddArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let list = list_id(google, account, args.list.as_deref()).await?;
        let mut body = json!({ "title": args.title.trim() });
        if let Some(notes) = &args.notes {
            body["notes"] = json!(notes);
        }
        if let Some(due) = &args.due {
            // The API keeps only the day of a due time.
            let day =
                chrono::NaiveDate::parse_from_str(due.trim().get(..10).unwrap_or(due), "%Y-%m-%d")
                    .map_err(|_| {
                        ToolError::failed(format!("'{due}' is not a day (write 2026-11-29)"))
                    })?;
            body["due"] = json!(format!("{}T00:00:00.000Z", day.format("%Y-%m-%d")));
        }
        let task: Task = google
            .json(
                account,
                TASKS,
                &Call::post(format!(
                    "{}/lists/{}/tasks",
                    google.endpoints().tasks,
                    segment(&list)
                ))
                .json(body),
            )
            .await?;
        Ok(format!("added:\n{}", show(&task)))
    }
}

/// `tasks.complete`.
#[derive(Debug)]
pub struct TasksComplete(pub Arc<Google>);

/// Arguments of `tasks.complete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksCompleteArgs {
    /// The task's id (from tasks.list).
    id: String,
    /// The list's name; the default list when absent.
    list: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for TasksComplete {
    type Args = TasksCompleteArgs;

    fn name(&self) -> &str {
        "tasks.complete"
    }

    fn description(&self) -> &str {
        "Mark one of the owner's Google Tasks done."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ActsOnAccount
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, args: TasksCompleteArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let list = list_id(google, account, args.list.as_deref()).await?;
        let task: Task = google
            .json(
                account,
                TASKS,
                &Call::new(
                    Method::PATCH,
                    format!(
                        "{}/lists/{}/tasks/{}",
                        google.endpoints().tasks,
                        segment(&list),
                        segment(&args.id)
                    ),
                )
                .json(json!({ "status": "completed" })),
            )
            .await?;
        Ok(format!("done:\n{}", show(&task)))
    }
}
