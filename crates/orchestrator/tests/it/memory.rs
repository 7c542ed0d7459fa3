//! Memory through the agent loop: saved in one session, found in
//! another (after a restart), injected into the prompt, and extracted
//! after compaction without duplicates.

use std::path::Path;

use flynn_memory::{Memory, Namespace, WriteMode};
use flynn_orchestrator::MemoryRuntime;
use flynn_protocol::config::TiersConfig;
use flynn_protocol::{ContentBlock, Message, Purpose, Role};
use flynn_sessions::UsageLog;
use serde_json::{Value, json};

use crate::{Harness, ScriptedModel, Setup, key, tiers};

fn call(id: &str, name: &str, input: Value) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }],
    }
}

async fn memory_in(dir: &Path) -> MemoryRuntime {
    let memory = Memory::open(dir.join("memory"), &dir.join("memory-index.db"), None)
        .await
        .unwrap();
    MemoryRuntime {
        memory,
        auto_extract: true,
        max_context_tokens: 2000,
        context_hits: 5,
    }
}

/// Default `m/one`, fast `f/cheap`, memory in `dir`.
async fn setup(dir: &Path) -> Setup {
    let mut models = tiers(&["m/one"]);
    models.tiers = TiersConfig {
        fast: vec!["f/cheap".parse().unwrap()],
        ..models.tiers
    };
    Setup {
        models,
        memory: Some(memory_in(dir).await),
        ..Setup::default()
    }
}

fn system_of(model: &ScriptedModel, call: usize) -> String {
    model.requests()[call]
        .system
        .as_deref()
        .unwrap_or_default()
        .to_owned()
}

fn tool_results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_fact_saved_in_one_session_is_used_in_another_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let memory_dir = tempfile::tempdir().unwrap();
    // Session one: the model saves what it was told.
    let main = ScriptedModel::replies(
        "m",
        vec![
            call(
                "t1",
                "memory.write",
                json!({"namespace": "user", "content": "- Allergic to peanuts"}),
            ),
            Message::assistant("Noted."),
        ],
    );
    let h = Harness::in_dir(dir, vec![main.clone()], setup(memory_dir.path()).await).await;
    let (outcome, _) = h
        .send(&key("telegram:1"), "Remember: I am allergic to peanuts")
        .await;
    assert_eq!(outcome.unwrap().reply, "Noted.");
    let saved = tool_results(&main.requests()[1].messages);
    assert!(saved[0].starts_with("created memory user"), "{saved:?}");
    // The plain first turn had no memory section: memory was empty.
    assert!(!system_of(&main, 0).contains("[Memory Context]"));
    h.manager.shutdown().await;

    // Days later, a new process and another session: the fact is in the
    // prompt, and memory.search finds it too.
    let dir = tempfile::tempdir().unwrap();
    let main = ScriptedModel::replies(
        "m",
        vec![
            call("s1", "tools.search", json!({"query": "memory"})),
            call("s2", "memory.search", json!({"query": "peanut allergy"})),
            Message::assistant("No satay for you."),
        ],
    );
    let h = Harness::in_dir(dir, vec![main.clone()], setup(memory_dir.path()).await).await;
    let (outcome, _) = h.send(&key("cli:default"), "Can I eat satay?").await;
    assert_eq!(outcome.unwrap().reply, "No satay for you.");
    let system = system_of(&main, 0);
    let section = &system[system.find("[Memory Context]").unwrap()..];
    assert!(
        section.contains("## User (user.md)\n- Allergic to peanuts"),
        "{section}"
    );
    let results = tool_results(&main.requests()[2].messages);
    assert_eq!(results.last().unwrap(), "user.md:1: - Allergic to peanuts");
}

#[tokio::test]
async fn related_notes_from_other_files_are_injected_for_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let memory_dir = tempfile::tempdir().unwrap();
    let setup = setup(memory_dir.path()).await;
    let memory = setup.memory.clone().unwrap().memory;
    memory
        .write(
            &Namespace::parse("projects/boat").unwrap(),
            "# Boat\n\nThe engine was serviced in April by Marco.\n\n## Mooring\nBerth 14 at the north pier.",
            WriteMode::Append,
        )
        .await
        .unwrap();
    let main = ScriptedModel::echo("m");
    let h = Harness::in_dir(dir, vec![main.clone()], setup).await;
    h.send(&key("cli:a"), "when was the engine serviced?")
        .await
        .0
        .unwrap();
    let system = system_of(&main, 0);
    assert!(
        system.contains("## Related notes (memory.search)\n- projects/boat.md:3: The engine was serviced in April by Marco."),
        "{system}"
    );
    assert!(!system.contains("Berth 14"), "only what matches: {system}");
    // A message about something else brings no section at all.
    h.send(&key("cli:a"), "hello there").await.0.unwrap();
    assert!(!system_of(&main, 1).contains("[Memory Context]"));
}

#[tokio::test]
async fn replacing_a_file_changed_since_it_was_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let memory_dir = tempfile::tempdir().unwrap();
    let setup = setup(memory_dir.path()).await;
    let memory = setup.memory.clone().unwrap().memory;
    memory
        .write(&Namespace::global(), "- one", WriteMode::Append)
        .await
        .unwrap();
    let main = ScriptedModel::replies(
        "m",
        vec![
            call(
                "r",
                "memory.write",
                json!({"namespace": "global", "content": "- two", "replace": true}),
            ),
            Message::assistant("ok"),
        ],
    );
    let h = Harness::in_dir(dir, vec![main.clone()], setup).await;
    h.send(&key("cli:a"), "rewrite global memory")
        .await
        .0
        .unwrap();
    let result = tool_results(&main.requests()[1].messages).pop().unwrap();
    assert!(
        result.contains("already has content") && result.contains("read it first"),
        "{result}"
    );
    let file = memory.read(&Namespace::global()).await.unwrap().unwrap();
    assert_eq!(file.content, "- one\n");
}

#[tokio::test]
async fn facts_are_extracted_after_compaction_on_the_fast_tier_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let memory_dir = tempfile::tempdir().unwrap();
    let setup = setup(memory_dir.path()).await;
    let memory = setup.memory.clone().unwrap().memory;
    memory
        .write(
            &Namespace::user(),
            "# User\n- Prefers green tea",
            WriteMode::Append,
        )
        .await
        .unwrap();
    let extraction = "user: The user prefers green tea\nuser: Has a sister called Ana in Porto\nglobal: The home server is called atlas\nsomething else";
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::replies(
        "f",
        vec![
            Message::assistant("summary one"),
            Message::assistant(extraction),
            Message::assistant("summary two"),
            // The same facts again, reworded: nothing new is appended.
            Message::assistant(
                "user: has a sister called Ana in Porto.\nglobal: the home server is called Atlas",
            ),
        ],
    );
    let h = Harness::in_dir(dir, vec![main, fast.clone()], setup).await;
    let k = key("cli:long");
    for i in 0..6 {
        h.send(&k, &format!("message {i}: my sister Ana lives in Porto"))
            .await
            .0
            .unwrap();
    }
    h.command(&k, "/compact").await;
    let requests = fast.requests();
    assert_eq!(requests.len(), 2, "a summary, then the extraction");
    let asked = &requests[1];
    assert!(
        asked
            .system
            .as_deref()
            .unwrap_or_default()
            .contains("long-term memory")
    );
    let text = crate::last_user_text(&asked.messages);
    assert!(
        text.contains("Already in memory (user.md):\n# User\n- Prefers green tea"),
        "{text}"
    );
    assert!(
        text.contains("my sister Ana lives in Porto") && text.contains("Its summary:\nsummary one"),
        "{text}"
    );

    let user = memory
        .read(&Namespace::user())
        .await
        .unwrap()
        .unwrap()
        .content;
    assert_eq!(
        user,
        "# User\n- Prefers green tea\n- Has a sister called Ana in Porto\n"
    );
    let global = memory
        .read(&Namespace::global())
        .await
        .unwrap()
        .unwrap()
        .content;
    assert_eq!(global, "- The home server is called atlas\n");

    for i in 6..12 {
        h.send(&k, &format!("message {i}")).await.0.unwrap();
    }
    h.command(&k, "/compact").await;
    assert_eq!(fast.requests().len(), 4);
    let again = memory
        .read(&Namespace::user())
        .await
        .unwrap()
        .unwrap()
        .content;
    assert_eq!(again, user, "no near-duplicate appended");
    let global_again = memory
        .read(&Namespace::global())
        .await
        .unwrap()
        .unwrap()
        .content;
    assert_eq!(global_again, global);

    // Costed as memory extraction.
    let purposes = h.store.usage_by_purpose(None).await.unwrap();
    let extraction = purposes
        .iter()
        .find(|line| line.purpose == Purpose::MemoryExtraction)
        .expect("memory extraction usage");
    assert_eq!(extraction.total.calls, 2);
}

#[tokio::test]
async fn memory_write_takes_the_design_notes_mode() {
    let dir = tempfile::tempdir().unwrap();
    let memory_dir = tempfile::tempdir().unwrap();
    let main = ScriptedModel::replies(
        "m",
        vec![
            call(
                "w1",
                "memory.write",
                json!({"namespace": "user", "content": "- Likes coffee", "mode": "replace"}),
            ),
            call(
                "w2",
                "memory.write",
                json!({"namespace": "user", "content": "- Likes tea", "mode": "append"}),
            ),
            call(
                "w3",
                "memory.write",
                json!({"namespace": "user", "content": "- x", "mode": "append", "replace": true}),
            ),
            Message::assistant("Saved."),
        ],
    );
    let h = Harness::in_dir(dir, vec![main.clone()], setup(memory_dir.path()).await).await;
    let (outcome, _) = h.send(&key("cli:default"), "I like coffee and tea").await;
    assert_eq!(outcome.unwrap().reply, "Saved.");
    let results = tool_results(&main.requests()[3].messages);
    assert!(results[0].starts_with("created memory user"), "{results:?}");
    assert!(results[1].starts_with("saved memory user"), "{results:?}");
    assert!(
        results[2].contains("mode is append but replace is true; give one of them"),
        "{results:?}"
    );
    let file = std::fs::read_to_string(memory_dir.path().join("memory/user.md")).unwrap();
    assert_eq!(file.trim(), "- Likes coffee\n- Likes tea");
    h.manager.shutdown().await;
}
