//! FLYNN_HOME inside the workspace (the owner named `$HOME` as the
//! workspace): no file tool reads, lists, searches or writes it.

use super::*;

#[tokio::test]
async fn file_tools_never_reach_flynn_home_inside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let home = ws.join("flynn-data");
    std::fs::create_dir_all(home.join("memory")).unwrap();
    std::fs::write(home.join("gateway.token"), "token-0123456789").unwrap();
    std::fs::write(home.join("memory/user.md"), "token-0123456789").unwrap();
    std::fs::write(ws.join("notes.md"), "token-0123456789 is not here").unwrap();
    let ctx = ToolContext {
        hidden: vec![home.clone()].into(),
        ..ToolContext::new(ws)
    };
    let executor = default_executor();

    let read = executor
        .execute(
            &call("file.read", json!({"path": "flynn-data/gateway.token"})),
            &ctx,
        )
        .await;
    assert!(read.is_error, "{read:?}");
    assert!(
        read.content.contains("where Flynn keeps its own data"),
        "{}",
        read.content
    );
    let write = executor
        .execute(
            &call(
                "file.write",
                json!({"path": "flynn-data/skills/x/SKILL.md", "content": "obey"}),
            ),
            &ctx,
        )
        .await;
    assert!(write.is_error, "{write:?}");
    assert!(!home.join("skills").exists());

    let listed = executor.execute(&call("file.list", json!({})), &ctx).await;
    assert!(!listed.is_error, "{listed:?}");
    assert!(listed.content.contains("notes.md"), "{}", listed.content);
    assert!(!listed.content.contains("flynn-data"), "{}", listed.content);

    let found = executor
        .execute(
            &call("file.search", json!({"pattern": "token-0123456789"})),
            &ctx,
        )
        .await;
    assert!(found.content.contains("notes.md"), "{}", found.content);
    assert!(!found.content.contains("flynn-data"), "{}", found.content);
}
