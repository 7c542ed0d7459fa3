//! Rewriting the config file: `config set`, `config.patch`, migrations.

use flynn_config::MapEnv;
use flynn_config::edit::{set_in_file, write_atomically};
use serde_json::json;

/// The rewrite goes through a temporary file beside the config; a
/// symbolic link planted at its name (the old name was predictable:
/// `.config.yaml.<pid>.tmp`) must not take the text anywhere else, and
/// the file keeps its mode, or gets 0600 when new (it may hold keys).
#[cfg(unix)]
#[test]
fn a_rewrite_neither_follows_a_planted_link_nor_widens_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "someone else's\n").unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let file = conf.join("config.yaml");
    std::fs::write(&file, "gateway:\n  bind: 127.0.0.1:18800\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let pid = std::process::id();
    let mut planted = vec![format!(".config.yaml.{pid}.tmp")];
    planted.extend((0..4).map(|n| format!(".config.yaml.{pid}.{n}.tmp")));
    for name in &planted {
        std::os::unix::fs::symlink(&outside, conf.join(name)).unwrap();
    }

    set_in_file(
        &file,
        &[("gateway.bind".to_owned(), json!("127.0.0.1:18801"))],
        &MapEnv::new(),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "someone else's\n"
    );
    assert!(std::fs::symlink_metadata(&file).unwrap().is_file());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "gateway:\n  bind: \"127.0.0.1:18801\"\n"
    );
    assert_eq!(mode(&file), 0o640);

    let new = conf.join("new.yaml");
    write_atomically(&new, "gateway: {}\n").unwrap();
    assert_eq!(mode(&new), 0o600);
    // Nothing but the planted links and the two files is left.
    let mut left: Vec<String> = std::fs::read_dir(&conf)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !planted.contains(name))
        .collect();
    left.sort();
    assert_eq!(left, ["config.yaml", "new.yaml"]);
}

/// Two writers editing different keys at once (two `config.patch` calls,
/// or `flynn config set` beside the daemon) take turns: neither change is
/// lost, and the file always parses.
#[test]
fn concurrent_edits_of_one_file_lose_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, "gateway:\n  bind: 127.0.0.1:18800\n").unwrap();
    let last = 140;
    std::thread::scope(|scope| {
        for key in ["gateway.shutdown_grace_secs", "gateway.max_connections"] {
            let file = &file;
            scope.spawn(move || {
                for round in 101..=last {
                    set_in_file(file, &[(key.to_owned(), json!(round))], &MapEnv::new()).unwrap();
                }
            });
        }
    });
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&format!("shutdown_grace_secs: {last}\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("max_connections: {last}\n")),
        "{text}"
    );
    flynn_config::parse_str(&text, &file, &MapEnv::new()).unwrap();
}
