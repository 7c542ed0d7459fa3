use flynn_skills::{Availability, FixedEnvironment, SkillSet, Sources};

use crate::{Dirs, linux, write_skill};

const GH: &str = r#"{
  "name": "gh",
  "description": "GitHub issues and pull requests.",
  "requires": {"os": ["macos"], "bins": ["gh"], "env": ["GITHUB_TOKEN"]}
}"#;

fn reasons(set: &SkillSet, name: &str) -> Vec<String> {
    match &set.get(name).unwrap().availability {
        Availability::Available => Vec::new(),
        Availability::Unavailable { reasons } => reasons.clone(),
    }
}

#[test]
fn missing_requirements_make_a_skill_unavailable_with_the_reasons() {
    let dirs = Dirs::new();
    write_skill(dirs.workspace(), "gh", GH, Some("use gh"));

    let set = dirs.load(&FixedEnvironment::new("linux"));
    assert_eq!(
        reasons(&set, "gh"),
        vec![
            "runs on macos only",
            "needs the binary 'gh' on PATH",
            "needs GITHUB_TOKEN set in the environment"
        ]
    );
    assert_eq!(reasons(&set, "git"), vec!["needs the binary 'git' on PATH"]);
    assert_eq!(
        reasons(&set, "system-info"),
        vec![
            "needs the binary 'uname' on PATH",
            "needs the binary 'df' on PATH"
        ]
    );
    assert_eq!(reasons(&set, "web-search"), Vec::<String>::new());

    let mac = FixedEnvironment::new("macos").with_bins(["gh"]);
    assert_eq!(
        reasons(&dirs.load(&mac), "gh"),
        vec!["needs GITHUB_TOKEN set in the environment"]
    );
    let ready = mac.with_vars(["GITHUB_TOKEN"]);
    assert_eq!(reasons(&dirs.load(&ready), "gh"), Vec::<String>::new());

    let windows = FixedEnvironment::new("windows").with_bins(["uname", "df"]);
    assert_eq!(
        reasons(
            &SkillSet::load(&Sources::default(), &windows),
            "system-info"
        ),
        vec!["runs on linux or macos only"]
    );
}

#[test]
fn an_unavailable_skill_is_left_out_of_the_index_and_cannot_be_read() {
    let dirs = Dirs::new();
    write_skill(dirs.workspace(), "gh", GH, Some("use gh"));
    let set = dirs.load(&linux());
    assert!(!set.index().contains("gh,"), "{}", set.index());
    assert!(!set.catalog().contains("gh —"), "{}", set.catalog());
    assert_eq!(
        set.instructions("gh").unwrap_err().to_string(),
        "skill 'gh' is unavailable: runs on macos only; needs the binary 'gh' on PATH; needs GITHUB_TOKEN set in the environment"
    );
}

#[test]
fn the_index_names_the_available_skills_in_one_line() {
    let dirs = Dirs::new();
    write_skill(dirs.workspace(), "gh", GH, Some("use gh"));
    insta::assert_snapshot!("index_linux", dirs.load(&linux()).index());
    // The descriptions, for a model that asks for a skill there is not.
    let catalog = dirs.load(&linux()).catalog();
    assert!(
        catalog.contains("- git — Inspect and change git repositories in the workspace"),
        "{catalog}"
    );
    assert!(!catalog.contains("- gh —"), "{catalog}");
    // Nothing available, no section at all.
    let none = FixedEnvironment::new("linux");
    let dirs = Dirs::new();
    write_skill(
        dirs.workspace(),
        "web-search",
        r#"{"name": "web-search", "description": "Off.", "requires": {"env": ["NOPE"]}}"#,
        Some("x"),
    );
    assert_eq!(dirs.load(&none).index(), "");
}
