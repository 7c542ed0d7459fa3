//! The Tasks API (`/tasks/v1/…`).
//!
//! Served: `GET users/@me/lists`; `GET lists/{list}/tasks`
//! (`showCompleted` true by default, `showHidden`, `dueMin` inclusive,
//! `dueMax` exclusive, `maxResults` 20 by default and at most 100,
//! `pageToken`; no `items` key when nothing is left); `POST
//! lists/{list}/tasks` (`title`, `notes`, `due`, `status`; a new task goes
//! to the top, as Google puts it); `GET` and `PATCH
//! lists/{list}/tasks/{task}` (`status: "completed"` sets `completed`,
//! `needsAction` clears it). Each account has one list, "My Tasks", also
//! known as `@default`. `due` must be RFC 3339; as Google, only its date
//! is kept (`…T00:00:00.000Z`). Reading needs `tasks` or
//! `tasks.readonly`, writing `tasks`.

use serde_json::{Value, json};

use super::{
    Answer, Caller, Fail, FakeGoogle, Req, State, invalid, json_body, not_found, now, ok, page,
    parse_rfc3339, rfc3339, size_param, unserved,
};

const SERVICE: &str = "tasks.googleapis.com";
const READ: &[&str] = &["tasks", "tasks.readonly"];
const WRITE: &[&str] = &["tasks"];

#[derive(Debug)]
pub(crate) struct TaskList {
    id: String,
    title: String,
    updated: String,
    tasks: Vec<Value>,
}

impl TaskList {
    pub fn new(id: String, title: &str) -> Self {
        TaskList {
            id,
            title: title.to_owned(),
            updated: rfc3339(now()),
            tasks: Vec::new(),
        }
    }

    fn resource(&self) -> Value {
        json!({
            "kind": "tasks#taskList",
            "id": self.id,
            "etag": format!("\"fake-{}\"", self.id),
            "title": self.title,
            "updated": self.updated,
            "selfLink": format!("https://www.googleapis.com/tasks/v1/users/@me/lists/{}", self.id),
        })
    }

    /// Positions follow the order of `tasks`, as Google's zero-padded
    /// strings.
    fn renumber(&mut self) {
        for (i, task) in self.tasks.iter_mut().enumerate() {
            task["position"] = json!(format!("{i:020}"));
        }
    }
}

/// `due` as Google keeps it: its date at midnight UTC.
fn due_of(text: &str) -> Result<String, Fail> {
    let due = parse_rfc3339(text)
        .ok_or_else(|| invalid(format!("Invalid value for due: {text:?} is not RFC 3339")))?;
    Ok(format!("{}T00:00:00.000Z", due.format("%Y-%m-%d")))
}

fn list_of<'a>(st: &'a mut State, email: &str, list: &str) -> Result<&'a mut TaskList, Fail> {
    let lists = &mut st.account(email).task_lists;
    let index = if list == "@default" {
        Some(0)
    } else {
        lists.iter().position(|l| l.id == list)
    };
    index
        .and_then(|i| lists.get_mut(i))
        .ok_or_else(|| not_found("Task list not found."))
}

fn new_task(n: u64, list: &str, fields: &serde_json::Map<String, Value>) -> Result<Value, Fail> {
    let id = format!("fakeTask{n:010}");
    let mut task = json!({
        "kind": "tasks#task",
        "id": id,
        "etag": format!("\"fake-{n}\""),
        "title": fields.get("title").and_then(Value::as_str).unwrap_or_default(),
        "updated": rfc3339(now()),
        "selfLink": format!("https://www.googleapis.com/tasks/v1/lists/{list}/tasks/{id}"),
        "position": "00000000000000000000",
        "status": "needsAction",
        "links": [],
        "webViewLink": format!("https://tasks.google.com/task/{id}"),
    });
    apply(&mut task, fields)?;
    Ok(task)
}

/// Applies the writable fields of a Task (insert or patch).
fn apply(task: &mut Value, fields: &serde_json::Map<String, Value>) -> Result<(), Fail> {
    for (key, value) in fields {
        match key.as_str() {
            "title" | "notes" => task[key] = value.clone(),
            "due" => match value.as_str() {
                Some(text) => task["due"] = json!(due_of(text)?),
                None => {
                    if let Some(object) = task.as_object_mut() {
                        object.remove("due");
                    }
                }
            },
            "status" => match value.as_str() {
                Some("completed") => {
                    task["status"] = json!("completed");
                    if task.get("completed").is_none() {
                        task["completed"] = json!(rfc3339(now()));
                    }
                }
                Some("needsAction") => {
                    task["status"] = json!("needsAction");
                    if let Some(object) = task.as_object_mut() {
                        object.remove("completed");
                    }
                }
                _ => return Err(invalid(format!("Invalid value for status: {value}"))),
            },
            "completed" => task["completed"] = value.clone(),
            // Read-only or ignored fields a client may echo back.
            "kind" | "id" | "etag" | "updated" | "selfLink" | "position" | "links" | "parent"
            | "hidden" | "deleted" | "webViewLink" => {}
            other => {
                return Err(invalid(format!(
                    "Invalid JSON payload: unknown field {other:?}"
                )));
            }
        }
    }
    task["updated"] = json!(rfc3339(now()));
    Ok(())
}

pub(crate) fn route(st: &mut State, req: &Req, caller: &Caller, segs: &[&str]) -> Answer {
    let scopes = match (req.method.as_str(), segs) {
        ("GET", ["users", "@me", "lists"]) => READ,
        ("GET", ["lists", _, "tasks"] | ["lists", _, "tasks", _]) => READ,
        ("POST", ["lists", _, "tasks"]) | ("PATCH", ["lists", _, "tasks", _]) => WRITE,
        _ => return Err(unserved()),
    };
    if let Some(response) = caller.require(scopes, SERVICE) {
        return Ok(response);
    }
    let email = caller.email.as_str();
    match (req.method.as_str(), segs) {
        ("GET", ["users", "@me", "lists"]) => lists(st, req, email),
        ("GET", ["lists", list, "tasks"]) => list_tasks(st, req, email, list),
        ("POST", ["lists", list, "tasks"]) => insert(st, req, email, list),
        ("GET", ["lists", list, "tasks", task]) => {
            let list = list_of(st, email, list)?;
            let task = list
                .tasks
                .iter()
                .find(|t| t["id"] == *task)
                .ok_or_else(|| not_found("Task not found."))?;
            Ok(ok(task))
        }
        ("PATCH", ["lists", list, "tasks", task]) => patch(st, req, email, list, task),
        _ => Err(unserved()),
    }
}

fn lists(st: &mut State, req: &Req, email: &str) -> Answer {
    let size = size_param(req, "maxResults", 20, 100)?;
    let all: Vec<Value> = st
        .account(email)
        .task_lists
        .iter()
        .map(TaskList::resource)
        .collect();
    let (items, next) = page(req, &all, size)?;
    let mut answer = json!({"kind": "tasks#taskLists", "etag": "\"fake-lists\"", "items": items});
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn bound(req: &Req, name: &str) -> Result<Option<String>, Fail> {
    match req.param(name) {
        None => Ok(None),
        Some(text) => parse_rfc3339(text)
            .map(|t| Some(rfc3339(t)))
            .ok_or_else(|| {
                invalid(format!(
                    "Invalid value for {name}: {text:?} is not RFC 3339"
                ))
            }),
    }
}

fn list_tasks(st: &mut State, req: &Req, email: &str, list: &str) -> Answer {
    let size = size_param(req, "maxResults", 20, 100)?;
    let completed = req.param("showCompleted") != Some("false");
    let hidden = req.param("showHidden") == Some("true");
    let min = bound(req, "dueMin")?;
    let max = bound(req, "dueMax")?;
    let list = list_of(st, email, list)?;
    let due = |t: &Value| t["due"].as_str().map(str::to_owned);
    let found: Vec<Value> = list
        .tasks
        .iter()
        .filter(|t| completed || t["status"] != "completed")
        .filter(|t| hidden || t["hidden"] != true)
        .filter(|t| min.as_ref().is_none_or(|m| due(t).is_some_and(|d| d >= *m)))
        .filter(|t| max.as_ref().is_none_or(|m| due(t).is_some_and(|d| d < *m)))
        .cloned()
        .collect();
    let (items, next) = page(req, &found, size)?;
    let mut answer = json!({"kind": "tasks#tasks", "etag": format!("\"fake-{}\"", list.id)});
    if !items.is_empty() {
        answer["items"] = json!(items);
    }
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn insert(st: &mut State, req: &Req, email: &str, list: &str) -> Answer {
    let body = json_body(req)?;
    let n = st.next();
    let list = list_of(st, email, list)?;
    let task = new_task(n, &list.id, &body)?;
    list.tasks.insert(0, task);
    list.renumber();
    list.updated = rfc3339(now());
    Ok(ok(&list.tasks[0]))
}

fn patch(st: &mut State, req: &Req, email: &str, list: &str, task: &str) -> Answer {
    let body = json_body(req)?;
    let list = list_of(st, email, list)?;
    let found = list
        .tasks
        .iter_mut()
        .find(|t| t["id"] == task)
        .ok_or_else(|| not_found("Task not found."))?;
    let mut changed = found.clone();
    apply(&mut changed, &body)?;
    *found = changed;
    Ok(ok(found))
}

impl FakeGoogle {
    /// Adds a task on top of a list of `email` (`@default` or a list id);
    /// `due` is RFC 3339. Returns the task's id.
    pub fn add_task(&self, email: &str, list: &str, title: &str, due: Option<&str>) -> String {
        let mut st = self.lock();
        let n = st.next();
        let mut fields = serde_json::Map::new();
        fields.insert("title".to_owned(), json!(title));
        if let Some(due) = due {
            fields.insert("due".to_owned(), json!(due));
        }
        let list = match list_of(&mut st, email, list) {
            Ok(list) => list,
            Err(_) => panic!("flynn-testkit: {email} has no task list {list}"),
        };
        let task = match new_task(n, &list.id, &fields) {
            Ok(task) => task,
            Err(problem) => panic!("flynn-testkit: Google would refuse this task: {problem:?}"),
        };
        let id = task["id"].as_str().unwrap_or_default().to_owned();
        list.tasks.insert(0, task);
        list.renumber();
        id
    }

    /// The tasks of a list (`@default` or an id), in the list's order;
    /// empty for an unknown list.
    pub fn tasks(&self, email: &str, list: &str) -> Vec<Value> {
        let mut st = self.lock();
        list_of(&mut st, email, list)
            .map(|l| l.tasks.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::OWNER;
    use super::super::testing::{call, get};
    use super::*;

    #[tokio::test]
    async fn tasks_are_listed_added_and_completed() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["tasks"]).access_token;
        let (status, lists) = get(&fake, &token, "/tasks/v1/users/@me/lists").await;
        assert_eq!(status, 200);
        assert_eq!(lists["items"][0]["title"], "My Tasks");
        let list_id = lists["items"][0]["id"].as_str().unwrap().to_owned();
        fake.add_task(OWNER, "@default", "Buy milk", Some("2026-12-01T15:00:00Z"));
        let (status, task) = call(
            &fake,
            "POST",
            &token,
            &format!("/tasks/v1/lists/{list_id}/tasks"),
            Some(json!({"title": "File taxes", "notes": "before March", "due": "2026-12-10T00:00:00.000Z"})),
        )
        .await;
        assert_eq!(status, 200, "{task}");
        assert_eq!(task["status"], "needsAction");
        assert_eq!(task["position"], "00000000000000000000");
        let id = task["id"].as_str().unwrap().to_owned();
        let (_, all) = get(&fake, &token, "/tasks/v1/lists/@default/tasks").await;
        let titles: Vec<&str> = all["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["title"].as_str().unwrap())
            .collect();
        assert_eq!(titles, vec!["File taxes", "Buy milk"]);
        assert_eq!(all["items"][1]["due"], "2026-12-01T00:00:00.000Z");
        let (_, soon) = get(
            &fake,
            &token,
            "/tasks/v1/lists/@default/tasks?dueMin=2026-12-01T00:00:00Z&dueMax=2026-12-05T00:00:00Z",
        )
        .await;
        assert_eq!(soon["items"].as_array().unwrap().len(), 1);

        let (status, done) = call(
            &fake,
            "PATCH",
            &token,
            &format!("/tasks/v1/lists/@default/tasks/{id}"),
            Some(json!({"status": "completed"})),
        )
        .await;
        assert_eq!(status, 200);
        assert!(done["completed"].is_string());
        let (_, open) = get(
            &fake,
            &token,
            "/tasks/v1/lists/@default/tasks?showCompleted=false",
        )
        .await;
        assert_eq!(open["items"].as_array().unwrap().len(), 1);
        let (_, one) = get(
            &fake,
            &token,
            &format!("/tasks/v1/lists/@default/tasks/{id}"),
        )
        .await;
        assert_eq!(one["status"], "completed");
        assert_eq!(fake.tasks(OWNER, "@default").len(), 2);
        assert_eq!(fake.violations(), Vec::<String>::new());

        let (status, _) = call(
            &fake,
            "POST",
            &token,
            "/tasks/v1/lists/@default/tasks",
            Some(json!({"title": "x", "due": "tomorrow"})),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(fake.violations().len(), 1);
    }

    #[tokio::test]
    async fn task_lists_page_and_reading_needs_the_scope() {
        let fake = FakeGoogle::start();
        for i in 0..25 {
            fake.add_task(OWNER, "@default", &format!("Task {i}"), None);
        }
        let token = fake.issue_tokens(OWNER, &["tasks.readonly"]).access_token;
        let (_, first) = get(&fake, &token, "/tasks/v1/lists/@default/tasks").await;
        assert_eq!(first["items"].as_array().unwrap().len(), 20);
        let next = first["nextPageToken"].as_str().unwrap();
        let (_, second) = get(
            &fake,
            &token,
            &format!("/tasks/v1/lists/@default/tasks?pageToken={next}"),
        )
        .await;
        assert_eq!(second["items"].as_array().unwrap().len(), 5);
        assert_eq!(second["items"][4]["title"], "Task 0");
        assert_eq!(second.get("nextPageToken"), None);
        let (status, _) = call(
            &fake,
            "POST",
            &token,
            "/tasks/v1/lists/@default/tasks",
            Some(json!({"title": "x"})),
        )
        .await;
        assert_eq!(status, 403);
        assert_eq!(fake.violations(), Vec::<String>::new());
    }
}
