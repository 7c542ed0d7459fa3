use std::path::Path;

use flynn_skills::{InstallOptions, Tier, install, remove};

use crate::{Dirs, linux, manifest, write_skill};

const WITH_SETUP: &str = r#"{
  "name": "gh",
  "description": "GitHub.",
  "install": {"command": ["brew", "install", "gh"], "description": "Installs the gh CLI."}
}"#;

fn tar_gz(path: &Path, entries: &[(&str, &[u8])]) {
    let file = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    let mut builder = tar::Builder::new(gz);
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        // Written raw, so names `set_path` refuses ('..', absolute) get in.
        let bytes = name.as_bytes();
        header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
}

#[test]
fn installs_from_a_directory_and_refuses_to_overwrite_without_force() {
    let dirs = Dirs::new();
    let source = write_skill(
        &dirs.tmp.path().join("src"),
        "anything",
        WITH_SETUP,
        Some("use gh"),
    );
    std::fs::create_dir_all(source.join("scripts")).unwrap();
    std::fs::write(source.join("scripts/run.sh"), "echo hi").unwrap();

    let installed = install(&source, dirs.managed(), InstallOptions::default()).unwrap();
    assert_eq!(installed.name, "gh");
    assert_eq!(installed.dir, dirs.managed().join("gh"));
    assert!(!installed.replaced);
    // The setup step is handed back, not run.
    assert_eq!(
        installed.setup.unwrap().command,
        vec!["brew", "install", "gh"]
    );
    assert_eq!(
        std::fs::read_to_string(installed.dir.join("scripts/run.sh")).unwrap(),
        "echo hi"
    );

    let set = dirs.load(&linux());
    assert_eq!(set.get("gh").unwrap().tier, Tier::Managed);
    assert_eq!(set.instructions("gh").unwrap(), "use gh");
    assert!(set.broken().is_empty(), "{:?}", set.broken());

    let again = install(&source, dirs.managed(), InstallOptions::default()).unwrap_err();
    assert!(again.is_already_installed());
    assert_eq!(
        again.to_string(),
        format!(
            "skill 'gh' is already installed in {}; remove it first or install with --force to replace it",
            dirs.managed().join("gh").display()
        )
    );
    std::fs::write(source.join("SKILL.md"), "use gh v2").unwrap();
    let forced = install(&source, dirs.managed(), InstallOptions { force: true }).unwrap();
    assert!(forced.replaced);
    assert_eq!(dirs.load(&linux()).instructions("gh").unwrap(), "use gh v2");
    // No staging directory is left behind.
    let left: Vec<String> = std::fs::read_dir(dirs.managed())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["gh"]);
}

#[test]
fn an_invalid_manifest_installs_nothing() {
    let dirs = Dirs::new();
    let source = write_skill(
        dirs.tmp.path(),
        "bad",
        r#"{"name": "Bad!", "description": "d"}"#,
        Some("x"),
    );
    let error = install(&source, dirs.managed(), InstallOptions::default()).unwrap_err();
    assert!(error.to_string().ends_with("manifest.json: name: 'Bad!' is not a valid skill name; expected lowercase letters, digits and '-', such as \"web-search\""), "{error}");
    let no_body = write_skill(dirs.tmp.path(), "nobody", &manifest("nobody", "d"), None);
    assert!(install(&no_body, dirs.managed(), InstallOptions::default()).is_err());
    assert_eq!(std::fs::read_dir(dirs.managed()).unwrap().count(), 0);
    let zip = dirs.tmp.path().join("skill.zip");
    std::fs::write(&zip, "PK").unwrap();
    assert_eq!(
        install(&zip, dirs.managed(), InstallOptions::default())
            .unwrap_err()
            .to_string(),
        format!(
            "{}: cannot install from this: expected a skill directory or a .tar.gz (.tgz) archive",
            zip.display()
        )
    );
}

#[cfg(unix)]
#[test]
fn a_directory_with_a_symlink_is_refused() {
    let dirs = Dirs::new();
    let source = write_skill(dirs.tmp.path(), "linky", &manifest("linky", "d"), Some("x"));
    std::os::unix::fs::symlink("/etc/passwd", source.join("passwd")).unwrap();
    let error = install(&source, dirs.managed(), InstallOptions::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "refusing to install {}: passwd: is a symbolic link or special file; a skill may hold only files and directories",
            source.display()
        )
    );
}

#[test]
fn installs_from_a_tar_gz_at_the_top_or_in_one_directory() {
    let dirs = Dirs::new();
    let flat = dirs.tmp.path().join("notes.tar.gz");
    let m = manifest("notes", "Notes.");
    tar_gz(
        &flat,
        &[("manifest.json", m.as_bytes()), ("SKILL.md", b"take notes")],
    );
    let installed = install(&flat, dirs.managed(), InstallOptions::default()).unwrap();
    assert_eq!(installed.name, "notes");

    let nested = dirs.tmp.path().join("todo-1.0.tgz");
    let m = manifest("todo", "Todo.");
    tar_gz(
        &nested,
        &[
            ("todo-1.0/manifest.json", m.as_bytes()),
            ("todo-1.0/SKILL.md", b"todo"),
        ],
    );
    install(&nested, dirs.managed(), InstallOptions::default()).unwrap();

    let set = dirs.load(&linux());
    assert_eq!(set.instructions("notes").unwrap(), "take notes");
    assert_eq!(set.instructions("todo").unwrap(), "todo");
}

#[test]
fn an_archive_entry_leaving_the_skill_refuses_the_install() {
    let dirs = Dirs::new();
    let m = manifest("evil", "Evil.");
    for bad in [
        "../escaped.txt",
        "/tmp/flynn-skills-absolute.txt",
        "x/../../escaped.txt",
    ] {
        let archive = dirs.tmp.path().join("evil.tar.gz");
        tar_gz(
            &archive,
            &[
                ("manifest.json", m.as_bytes()),
                ("SKILL.md", b"x"),
                (bad, b"gotcha"),
            ],
        );
        let error = install(&archive, dirs.managed(), InstallOptions::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "refusing to install {}: {bad}: leads outside the skill's directory ('..' or an absolute path)",
                archive.display()
            )
        );
    }
    assert!(!dirs.managed().join("escaped.txt").exists());
    assert!(!dirs.tmp.path().join("home/escaped.txt").exists());
    assert!(!Path::new("/tmp/flynn-skills-absolute.txt").exists());
    assert_eq!(std::fs::read_dir(dirs.managed()).unwrap().count(), 0);
}

#[test]
fn only_managed_skills_can_be_removed() {
    let dirs = Dirs::new();
    write_skill(dirs.managed(), "notes", &manifest("notes", "N."), Some("x"));
    write_skill(dirs.workspace(), "mine", &manifest("mine", "M."), Some("x"));

    assert_eq!(
        remove("notes", &dirs.sources).unwrap(),
        dirs.managed().join("notes")
    );
    assert!(dirs.load(&linux()).get("notes").is_none());

    let error = remove("mine", &dirs.sources).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "skill 'mine' is a workspace skill: {} is your own directory, so Flynn does not delete it; remove it yourself if you no longer want it",
            dirs.workspace().join("mine").display()
        )
    );
    assert!(dirs.workspace().join("mine").is_dir());
    assert_eq!(
        remove("git", &dirs.sources).unwrap_err().to_string(),
        "skill 'git' is bundled with Flynn and cannot be removed; a managed or workspace skill named 'git' overrides it"
    );
    assert!(remove("notes", &dirs.sources).unwrap_err().is_not_found());
    assert!(remove("../home", &dirs.sources).unwrap_err().is_not_found());
}

/// Managed skills live in FLYNN_HOME: every directory an install makes
/// (the tier, the skill, its subdirectories) is private to the user.
#[cfg(unix)]
#[test]
fn installed_skills_are_in_private_directories() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dirs = Dirs::new();
    let source = write_skill(
        &dirs.tmp.path().join("src"),
        "anything",
        &manifest("notes", "Notes."),
        Some("take notes"),
    );
    std::fs::create_dir_all(source.join("scripts")).unwrap();
    std::fs::write(source.join("scripts/run.sh"), "echo hi").unwrap();
    let copied = install(&source, dirs.managed(), InstallOptions::default()).unwrap();

    let nested = dirs.tmp.path().join("todo-1.0.tgz");
    let m = manifest("todo", "Todo.");
    tar_gz(
        &nested,
        &[
            ("todo-1.0/manifest.json", m.as_bytes()),
            ("todo-1.0/SKILL.md", b"todo"),
            ("todo-1.0/lib/util.txt", b"x"),
        ],
    );
    let unpacked = install(&nested, dirs.managed(), InstallOptions::default()).unwrap();

    let home = dirs.managed().parent().unwrap();
    let modes = [
        home,
        dirs.managed(),
        &copied.dir,
        &copied.dir.join("scripts"),
        &unpacked.dir,
        &unpacked.dir.join("lib"),
    ]
    .map(mode);
    assert_eq!(modes, [0o700; 6]);
}
