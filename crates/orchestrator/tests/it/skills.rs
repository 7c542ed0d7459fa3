//! Skills in a turn: the index in the system prompt, `skills.read`
//! returning the instructions, a skill dropped into the workspace picked
//! up by the next turn.

use std::sync::Arc;
use std::time::Duration;

use flynn_orchestrator::SkillsRuntime;
use flynn_protocol::{ContentBlock, Message, Role};
use flynn_skills::{FixedEnvironment, Sources};
use serde_json::json;

use crate::{Harness, Scripted, Setup, key};

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
    let model = Scripted::replies(
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
    assert!(
        system.contains("- deploy — Deploy the app with the team's script."),
        "{system}"
    );
    assert!(system.contains("call `skills.read`"), "{system}");
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
    assert!(
        system.contains("- backup — Back up the database."),
        "{system}"
    );
    let (error, is_error) = tool_result(requests[3].messages.last().unwrap());
    assert!(is_error, "{error}");
    assert!(error.contains("nope"), "{error}");
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
    let model = Scripted::replies(
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

    let (result, _) = h.send(&key("cli:notes"), "and the secret?").await;
    assert_eq!(result.unwrap().reply, "Read it.");
    let requests = model.requests();
    let (content, is_error) = tool_result(requests[7].messages.last().unwrap());
    assert!(!is_error, "{content}");
    assert!(content.contains("hunter2"), "{content}");
}
