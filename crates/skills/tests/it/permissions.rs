use std::path::Path;

use flynn_skills::{Asked, Refusal, SkillSet, Sources};

use crate::{Dirs, linux, write_skill};

#[test]
fn tools_outside_the_declared_globs_are_refused() {
    let set = SkillSet::load(&Sources::default(), &linux());
    let git = set.get("git").unwrap().permissions(None);
    assert_eq!(git.check_tool("shell.exec"), Ok(()));
    assert_eq!(
        git.check_tool("web.fetch"),
        Err(Refusal {
            skill: "git".into(),
            asked: Asked::Tool("web.fetch".into()),
            allowed: "its manifest allows only the tools 'shell.exec'".into(),
        })
    );
    assert_eq!(
        git.check_tool("web.fetch").unwrap_err().to_string(),
        "skill 'git' may not call the tool 'web.fetch': its manifest allows only the tools 'shell.exec'"
    );

    let dirs = Dirs::new();
    write_skill(
        dirs.workspace(),
        "research",
        r#"{"name": "research", "description": "R.", "permissions": {"tools": ["web.*", "memory.?et"]}}"#,
        Some("x"),
    );
    write_skill(
        dirs.workspace(),
        "plain",
        r#"{"name": "plain", "description": "P."}"#,
        Some("x"),
    );
    let set = dirs.load(&linux());
    let research = set.get("research").unwrap().permissions(None);
    for ok in ["web.search", "web.fetch", "memory.get", "memory.set"] {
        assert_eq!(research.check_tool(ok), Ok(()), "{ok}");
    }
    for refused in ["shell.exec", "webby.search", "memory.delete"] {
        assert!(research.check_tool(refused).is_err(), "{refused}");
    }
    assert_eq!(
        set.get("plain")
            .unwrap()
            .permissions(None)
            .check_tool("shell.exec")
            .unwrap_err()
            .to_string(),
        "skill 'plain' may not call the tool 'shell.exec': its manifest allows no tools"
    );
}

#[test]
fn paths_outside_the_declared_ones_are_refused() {
    let dirs = Dirs::new();
    let ws = dirs.tmp.path().join("ws");
    let home = dirs.tmp.path().join("home");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(home.join("notes")).unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    // A link inside the workspace that leads out of it.
    #[cfg(unix)]
    std::os::unix::fs::symlink(home.join(".ssh"), ws.join("keys")).unwrap();
    write_skill(
        dirs.workspace(),
        "notes",
        r#"{"name": "notes", "description": "N.", "permissions": {"paths": ["src", "~/notes"]}}"#,
        Some("x"),
    );
    let set = dirs.load(&linux());
    let notes = set.get("notes").unwrap().permissions(Some(&home));
    for ok in ["src", "src/lib.rs", "src/new/dir/file", "./src/../src/x"] {
        assert_eq!(notes.check_path(Path::new(ok), &ws, false), Ok(()), "{ok}");
    }
    assert_eq!(
        notes.check_path(&home.join("notes/today.md"), &ws, false),
        Ok(())
    );
    assert_eq!(
        notes.check_path(Path::new("~/notes/today.md"), &ws, false),
        Ok(())
    );
    for refused in [
        "Cargo.toml",
        "src/../Cargo.toml",
        "../outside",
        "~/.ssh/id_ed25519",
        "/etc/passwd",
    ] {
        assert!(
            notes.check_path(Path::new(refused), &ws, false).is_err(),
            "{refused}"
        );
    }
    #[cfg(unix)]
    {
        let git = set.get("git").unwrap().permissions(Some(&home));
        assert_eq!(git.check_path(Path::new("src/main.rs"), &ws, false), Ok(()));
        assert!(
            git.check_path(Path::new("keys/id_ed25519"), &ws, false)
                .is_err()
        );
    }
    assert_eq!(
        notes
            .check_path(Path::new("/etc/passwd"), &ws, false)
            .unwrap_err()
            .to_string(),
        "skill 'notes' may not use the path '/etc/passwd': its manifest allows only the paths 'src', '~/notes'"
    );
    let web = set.get("web-search").unwrap().permissions(Some(&home));
    assert_eq!(
        web.check_path(Path::new("src"), &ws, false)
            .unwrap_err()
            .to_string(),
        "skill 'web-search' may not use the path 'src': its manifest allows no paths"
    );
}

#[test]
fn fs_read_and_fs_write_are_kept_apart() {
    let dirs = Dirs::new();
    let ws = dirs.tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    write_skill(
        dirs.workspace(),
        "report",
        r#"{"name": "report", "description": "R.", "permissions": {"tools": ["file.*"], "fs": {"read": ["data"], "write": ["out"]}}}"#,
        Some("x"),
    );
    let set = dirs.load(&linux());
    let report = set.get("report").unwrap().permissions(None);
    // Reading: data and out; writing: out only.
    assert_eq!(
        report.check_path(Path::new("data/q3.csv"), &ws, false),
        Ok(())
    );
    assert_eq!(
        report.check_path(Path::new("out/q3.md"), &ws, false),
        Ok(())
    );
    assert_eq!(report.check_path(Path::new("out/q3.md"), &ws, true), Ok(()));
    assert_eq!(
        report
            .check_path(Path::new("data/q3.csv"), &ws, true)
            .unwrap_err()
            .to_string(),
        "skill 'report' may not use the path 'data/q3.csv': its manifest allows only the paths to write 'out'"
    );
    assert!(
        report
            .check_path(Path::new("secret.txt"), &ws, false)
            .is_err()
    );
}

#[test]
fn net_lists_the_hosts_a_skill_may_reach() {
    let dirs = Dirs::new();
    write_skill(
        dirs.workspace(),
        "issues",
        r#"{"name": "issues", "description": "I.", "permissions": {"tools": ["web.fetch"], "net": ["api.github.com", "*.githubusercontent.com"]}}"#,
        Some("x"),
    );
    let set = dirs.load(&linux());
    let issues = set.get("issues").unwrap().permissions(None);
    assert_eq!(issues.check_host("api.github.com"), Ok(()));
    assert_eq!(issues.check_host("API.GitHub.com."), Ok(()));
    assert_eq!(issues.check_host("raw.githubusercontent.com"), Ok(()));
    assert_eq!(
        issues.check_host("evil.example").unwrap_err().to_string(),
        "skill 'issues' may not reach the host 'evil.example': its manifest allows only the hosts 'api.github.com', '*.githubusercontent.com'"
    );
    // A host list is not the whole network: commands still need it.
    assert!(issues.check_network().is_err());
    // `network: true` reaches every host.
    let web = set.get("web-search").unwrap().permissions(None);
    assert_eq!(web.check_host("evil.example"), Ok(()));
}

#[test]
fn network_use_needs_the_declaration() {
    let set = SkillSet::load(&Sources::default(), &linux());
    assert_eq!(
        set.get("web-search")
            .unwrap()
            .permissions(None)
            .check_network(),
        Ok(())
    );
    let refusal = set
        .get("system-info")
        .unwrap()
        .permissions(None)
        .check_network()
        .unwrap_err();
    assert_eq!(refusal.asked, Asked::Network);
    assert_eq!(
        refusal.to_string(),
        "skill 'system-info' may not use the network: its manifest does not declare network access (\"network\": true)"
    );
}
