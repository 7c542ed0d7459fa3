//! `flynn skills`: listing with gating, install (nothing run), remove.

use serde_json::Value;

use crate::{Env, stderr, stdout};

#[test]
fn a_skill_is_installed_listed_shown_and_removed() {
    let env = Env::new().var("OPENAI_API_KEY", "sk-x");
    let source = env.path().join("incoming/notes");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(
        source.join("manifest.json"),
        r#"{"name": "notes", "description": "Keep meeting notes.",
            "requires": {"env": ["NOTES_TOKEN"]},
            "permissions": {"tools": ["file.*"], "paths": ["notes"]},
            "install": {"command": ["touch", "installed-marker"], "description": "creates a marker"}}"#,
    )
    .unwrap();
    std::fs::write(
        source.join("SKILL.md"),
        "# Notes\n\nWrite notes to notes/.\n",
    )
    .unwrap();

    let installed = env.run(&["skills", "install", source.to_str().unwrap()]);
    assert_eq!(installed.status.code(), Some(0), "{}", stderr(&installed));
    let text = stdout(&installed);
    assert!(text.starts_with("Installed skill 'notes' in "), "{text}");
    assert!(
        text.contains("permissions: tools file.*; paths notes; network no"),
        "{text}"
    );
    assert!(
        text.contains("It has a setup step, not run: creates a marker (`touch installed-marker`)"),
        "{text}"
    );
    assert!(
        !env.path().join("installed-marker").exists(),
        "the setup step did not run"
    );
    let again = env.run(&["skills", "install", source.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("notes"), "{}", stderr(&again));

    let listed = env.run(&["skills", "list", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let notes = listed["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "notes")
        .unwrap()
        .clone();
    assert_eq!(notes["tier"], "managed");
    assert_eq!(notes["available"], false);
    assert!(
        notes["reasons"][0]
            .as_str()
            .unwrap()
            .contains("NOTES_TOKEN")
    );
    let bundled: Vec<&str> = listed["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tier"] == "bundled")
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(bundled, ["git", "system-info", "web-search"]);

    let shown = env.run(&["skills", "show", "notes"]);
    assert!(stdout(&shown).contains("Write notes to notes/."));
    let removed = env.run(&["skills", "remove", "notes"]);
    assert_eq!(removed.status.code(), Some(0), "{}", stderr(&removed));
    let bundled = env.run(&["skills", "remove", "git"]);
    assert_eq!(bundled.status.code(), Some(1));
    let missing = env.run(&["skills", "show", "notes"]);
    assert!(
        stderr(&missing).contains("no skill named 'notes'"),
        "{}",
        stderr(&missing)
    );
}
