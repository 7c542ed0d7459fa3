//! `flynn pairing` on the session database, as the owner uses it while
//! the daemon runs or not.

use flynn_core::{Pairing, SqliteStore};
use serde_json::Value;

use crate::{Env, stderr, stdout};

fn env() -> Env {
    Env::new()
        .var("OPENAI_BASE_URL", "http://127.0.0.1:9")
        .var("OPENAI_API_KEY", "sk-x")
}

#[tokio::test]
async fn the_owner_lists_approves_and_revokes_senders() {
    let env = env();
    let empty = env.run(&["pairing", "list"]);
    assert_eq!(empty.status.code(), Some(0), "{}", stderr(&empty));
    assert_eq!(stdout(&empty), "No pairing codes waiting.\n");

    // What the daemon does when a stranger writes.
    let db = env.path().join("home/sessions.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ticket = store
        .pairing_request("telegram", "42", Some("@alice"), now, 3_600_000)
        .await
        .unwrap();

    let listed = env.run(&["pairing", "list"]);
    let text = stdout(&listed);
    assert!(
        text.contains(&format!("telegram  {}  @alice (42)", ticket.code)),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Approve with: flynn pairing approve telegram {}",
            ticket.code
        )),
        "{text}"
    );

    let wrong = env.run(&["pairing", "approve", "telegram", "ZZZZZZ"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        stderr(&wrong).contains("no pairing code ZZZZZZ on telegram"),
        "{}",
        stderr(&wrong)
    );
    let unknown = env.run(&["pairing", "approve", "telegrm", &ticket.code]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("unknown channel 'telegrm'"));

    let approved = env.run(&[
        "pairing",
        "approve",
        "telegram",
        &ticket.code.to_lowercase(),
    ]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    assert_eq!(
        stdout(&approved),
        "Approved @alice (42) on telegram as a guest: they can talk to Flynn now, in their own session and memory. (`--owner` approves an owner.)\n"
    );
    assert!(store.peer_approved("telegram", "42").await.unwrap());
    assert!(!store.peer_owner("telegram", "42").await.unwrap());

    let listed = env.run(&["pairing", "list", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert_eq!(listed["pending"].as_array().unwrap().len(), 0);
    assert_eq!(listed["approved"][0]["sender"], "42");
    assert_eq!(listed["approved"][0]["channel"], "telegram");

    let revoked = env.run(&["pairing", "revoke", "telegram", "42"]);
    assert_eq!(stdout(&revoked), "Revoked 42 on telegram.\n");
    assert!(!store.peer_approved("telegram", "42").await.unwrap());
    let again = env.run(&["pairing", "revoke", "telegram", "42"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("was not approved by pairing"));
}

#[tokio::test]
async fn the_owner_approves_another_owner_with_owner() {
    let env = env();
    let db = env.path().join("home/sessions.db");
    // The CLI creates the database on first use.
    assert_eq!(env.run(&["pairing", "list"]).status.code(), Some(0));
    let store = SqliteStore::open(&db).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ticket = store
        .pairing_request("telegram", "7", Some("Bob"), now, 3_600_000)
        .await
        .unwrap();
    let approved = env.run(&["pairing", "approve", "telegram", &ticket.code, "--owner"]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    assert_eq!(
        stdout(&approved),
        "Approved Bob (7) on telegram as an owner: their messages have your rights.\n"
    );
    assert!(store.peer_owner("telegram", "7").await.unwrap());
    let listed = env.run(&["pairing", "list"]);
    assert!(
        stdout(&listed).contains("Bob (7)  owner"),
        "{}",
        stdout(&listed)
    );
    let json = env.run(&["pairing", "list", "--json"]);
    let json: Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(json["approved"][0]["owner"], true);
}

#[test]
fn config_profile_and_gateway_go_before_or_after_the_command() {
    let env = env();
    let bad = env.path().join("x.yaml");
    std::fs::write(&bad, "gateway:\n  bnd: 127.0.0.1:1\n").unwrap();
    let bad = bad.to_str().unwrap();
    // The file is read either way: its mistake is reported either way.
    let before = env.run(&["--config", bad, "pairing", "list"]);
    let after = env.run(&["pairing", "list", "--config", bad]);
    assert_eq!(before.status.code(), Some(2), "{}", stderr(&before));
    assert!(
        stderr(&before).starts_with(&format!("error: {bad}:2:3: gateway.bnd: ")),
        "{}",
        stderr(&before)
    );
    assert_eq!(
        (after.status.code(), stderr(&after)),
        (before.status.code(), stderr(&before))
    );

    let good = env.path().join("good.yaml");
    std::fs::write(&good, "gateway:\n  bind: 127.0.0.1:18800\n").unwrap();
    std::fs::create_dir(env.path().join("profiles")).unwrap();
    std::fs::write(
        env.path().join("profiles/other.overlay.yaml"),
        "gateway:\n  bind: 127.0.0.1:18899\n",
    )
    .unwrap();
    let good = good.to_str().unwrap();
    for args in [
        &[
            "--config",
            good,
            "--profile",
            "other",
            "config",
            "get",
            "gateway.bind",
        ][..],
        &[
            "config",
            "get",
            "gateway.bind",
            "--config",
            good,
            "--profile",
            "other",
        ][..],
        &[
            "--profile",
            "other",
            "config",
            "get",
            "gateway.bind",
            "--config",
            good,
        ][..],
    ] {
        let output = env.run(args);
        assert_eq!(
            (output.status.code(), stdout(&output)),
            (Some(0), "127.0.0.1:18899\n".to_owned()),
            "{args:?}: {}",
            stderr(&output)
        );
    }

    // No daemon at the address: unreachable (exit 4) in either order.
    for args in [
        &["--gateway", "http://127.0.0.1:9", "pairing", "list"][..],
        &["pairing", "list", "--gateway", "http://127.0.0.1:9"][..],
    ] {
        let output = env.run(args);
        assert_eq!(
            output.status.code(),
            Some(4),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // A command that works on the files alone says it has no use for it.
    let output = env.run(&["--gateway", "http://127.0.0.1:9", "skills", "list"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (
            Some(2),
            "error: --gateway: this command works on this machine's files, not through a daemon (--gateway is for send, sessions, usage, pairing, doctor, mcp list and mcp serve)\n"
        )
    );
}
