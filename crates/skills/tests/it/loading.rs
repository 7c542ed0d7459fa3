use flynn_skills::{Availability, SkillSet, Sources, Tier};

use crate::{Dirs, linux, manifest, write_skill};

fn listing(set: &SkillSet) -> Vec<(String, Tier, Option<Tier>)> {
    set.skills()
        .map(|s| (s.name.clone(), s.tier, s.overrides))
        .collect()
}

#[test]
fn bundled_skills_load_with_no_directories() {
    let set = SkillSet::load(&Sources::default(), &linux());
    assert_eq!(
        listing(&set),
        vec![
            ("git".into(), Tier::Bundled, None),
            ("system-info".into(), Tier::Bundled, None),
            ("web-search".into(), Tier::Bundled, None),
        ]
    );
    assert!(set.broken().is_empty());
    let body = set.instructions("git").unwrap();
    assert!(body.starts_with("# Git\n"), "{body}");
}

#[test]
fn workspace_overrides_managed_overrides_bundled() {
    let dirs = Dirs::new();
    write_skill(
        dirs.managed(),
        "git",
        &manifest("git", "Managed git."),
        Some("managed git"),
    );
    write_skill(
        dirs.managed(),
        "notes",
        &manifest("notes", "Managed notes."),
        Some("managed notes"),
    );
    write_skill(
        dirs.workspace(),
        "git",
        &manifest("git", "Workspace git."),
        Some("workspace git"),
    );
    write_skill(
        dirs.workspace(),
        "web-search",
        &manifest("web-search", "Mine."),
        Some("my search"),
    );
    write_skill(
        dirs.workspace(),
        "todo",
        &manifest("todo", "Todo lists."),
        Some("todo"),
    );
    // Neither a hidden directory nor a loose file is a skill.
    write_skill(
        dirs.workspace(),
        ".install-x",
        &manifest("x", "x"),
        Some("x"),
    );
    std::fs::write(dirs.workspace().join("README.md"), "my skills").unwrap();

    let set = dirs.load(&linux());
    assert_eq!(
        listing(&set),
        vec![
            ("git".into(), Tier::Workspace, Some(Tier::Managed)),
            ("notes".into(), Tier::Managed, None),
            ("system-info".into(), Tier::Bundled, None),
            ("todo".into(), Tier::Workspace, None),
            ("web-search".into(), Tier::Workspace, Some(Tier::Bundled)),
        ]
    );
    assert!(set.broken().is_empty());
    assert_eq!(set.instructions("git").unwrap(), "workspace git");
    assert_eq!(set.instructions("notes").unwrap(), "managed notes");
    let git = set.get("git").unwrap();
    assert_eq!(
        git.dir.as_deref(),
        Some(dirs.workspace().join("git").as_path())
    );
    assert_eq!(git.manifest.description, "Workspace git.");
}

#[test]
fn the_body_is_read_when_used_not_when_loaded() {
    let dirs = Dirs::new();
    let dir = write_skill(
        dirs.managed(),
        "notes",
        &manifest("notes", "Notes."),
        Some("first"),
    );
    let set = dirs.load(&linux());
    std::fs::write(dir.join("SKILL.md"), "edited").unwrap();
    assert_eq!(set.instructions("notes").unwrap(), "edited");
}

#[test]
fn broken_skills_are_listed_with_their_errors_and_hide_nothing() {
    let dirs = Dirs::new();
    let ws = dirs.workspace();
    write_skill(ws, "good", &manifest("good", "Works."), Some("ok"));
    write_skill(ws, "no-body", &manifest("no-body", "No SKILL.md."), None);
    write_skill(
        ws,
        "bad-json",
        r#"{"name": "bad-json", "description": 3}"#,
        Some("x"),
    );
    write_skill(ws, "renamed", &manifest("other", "Wrong name."), Some("x"));
    std::fs::create_dir_all(ws.join("empty")).unwrap();
    // A broken workspace skill does not replace the bundled one.
    write_skill(ws, "git", r#"{"name": "git"}"#, Some("x"));

    let set = dirs.load(&linux());
    let broken: Vec<(String, Tier, String)> = set
        .broken()
        .iter()
        .map(|b| {
            let message = b
                .error
                .to_string()
                .replace(&ws.display().to_string(), "<ws>");
            (b.name.clone(), b.tier, message)
        })
        .collect();
    assert_eq!(
        broken,
        vec![
            (
                "bad-json".into(),
                Tier::Workspace,
                "<ws>/bad-json/manifest.json:1:37: description: invalid type: integer `3`, expected a string".into()
            ),
            (
                "empty".into(),
                Tier::Workspace,
                "<ws>/empty/manifest.json: missing: a skill directory needs manifest.json (its name, description, requirements and permissions)".into()
            ),
            (
                "git".into(),
                Tier::Workspace,
                "<ws>/git/manifest.json:1:15: missing field `description`".into()
            ),
            (
                "no-body".into(),
                Tier::Workspace,
                "<ws>/no-body/SKILL.md: missing: a skill directory needs SKILL.md (the instructions the model reads)".into()
            ),
            (
                "renamed".into(),
                Tier::Workspace,
                "<ws>/renamed/manifest.json: name: 'other' is not the name of its directory 'renamed'; expected the two to be the same".into()
            ),
        ]
    );
    let names: Vec<&str> = set.skills().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["git", "good", "system-info", "web-search"]);
    assert_eq!(set.get("git").unwrap().tier, Tier::Bundled);
    assert_eq!(
        set.get("good").unwrap().availability,
        Availability::Available
    );
}

#[test]
fn a_skill_whose_instructions_vanished_reports_the_file() {
    let dirs = Dirs::new();
    let dir = write_skill(
        dirs.managed(),
        "notes",
        &manifest("notes", "Notes."),
        Some("x"),
    );
    let set = dirs.load(&linux());
    std::fs::remove_file(dir.join("SKILL.md")).unwrap();
    let error = set.instructions("notes").unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("{}: ", dir.join("SKILL.md").display())),
        "{error}"
    );
    assert_eq!(
        set.instructions("nope").unwrap_err().to_string(),
        "no skill is named 'nope' (`flynn skills list` shows them)"
    );
}
