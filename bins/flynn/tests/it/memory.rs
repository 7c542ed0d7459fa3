//! `flynn memory`: status, search, show and reindex on the memory the
//! config points at, with no model configured.

use flynn_testkit::{FakeEmbeddings, Vendor};
use serde_json::Value;

use crate::{Env, stderr, stdout};

fn with_memory(env: &Env) {
    let dir = env.path().join("home/memory");
    std::fs::create_dir_all(dir.join("projects")).unwrap();
    std::fs::write(
        dir.join("user.md"),
        "# About\n\n- Name: Dana\n- Allergic to peanuts\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("projects/boat.md"),
        "The engine was serviced in April.\n",
    )
    .unwrap();
}

#[test]
fn memory_commands_work_on_the_files_without_an_embedder() {
    let env = Env::new();
    with_memory(&env);
    let home = env.path().join("home");

    let status = env.run(&["memory", "status"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let text = stdout(&status);
    assert!(
        text.starts_with(&format!("memory   {}\n", home.join("memory").display())),
        "{text}"
    );
    assert!(text.contains("2 files, 2 chunks\n"), "{text}");
    assert!(
        text.contains(
            "search   keywords only (BM25): no embedder is configured (memory.embeddings)"
        ),
        "{text}"
    );

    let found = env.run(&["memory", "search", "peanut allergy"]);
    assert_eq!(
        stdout(&found),
        "user.md:3-4: - Name: Dana - Allergic to peanuts\n"
    );
    let found = env.run(&["memory", "search", "--json", "engine"]);
    let hits: Value = serde_json::from_str(&stdout(&found)).unwrap();
    assert_eq!(hits[0]["file"], "projects/boat.md");
    assert_eq!(hits[0]["start_line"], 1);
    let none = env.run(&["memory", "search", "submarine"]);
    assert_eq!(stdout(&none), "no memory matches \"submarine\"\n");

    let shown = env.run(&["memory", "show", "user"]);
    assert_eq!(
        stdout(&shown),
        "# About\n\n- Name: Dana\n- Allergic to peanuts\n"
    );
    let missing = env.run(&["memory", "show", "global"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("no memory file global.md in")
            && stderr(&missing).contains("(files: projects/boat, user)"),
        "{}",
        stderr(&missing)
    );
    let bad = env.run(&["memory", "show", "../etc/passwd"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));

    // An edit with an editor is seen at once.
    std::fs::write(home.join("memory/user.md"), "- Allergic to shellfish\n").unwrap();
    let found = env.run(&["memory", "search", "peanut"]);
    assert_eq!(stdout(&found), "no memory matches \"peanut\"\n");
    let reindexed = env.run(&["memory", "reindex"]);
    assert_eq!(
        stdout(&reindexed),
        "indexed 2 files: 2 chunks (keywords only: no embedder is configured)\n"
    );
}

#[tokio::test]
async fn memory_status_names_the_embedder_and_its_failures() {
    let fake = FakeEmbeddings::start(Vendor::OpenAi);
    let env = Env::new();
    with_memory(&env);
    let config = env.path().join("flynn.yaml");
    std::fs::write(
        &config,
        format!(
            "memory:\n  embeddings: {{kind: openai, base_url: \"{}\"}}\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let status = env.run(&["memory", "--config", &config, "status"]);
    assert!(
        stdout(&status).contains("search   hybrid: keywords (BM25) and vectors from openai/text-embedding-3-small (64 dimensions), 2 of 2 chunks embedded"),
        "{}{}",
        stdout(&status),
        stderr(&status)
    );
    assert_eq!(fake.texts_embedded(), 2);
    let found = env.run(&["memory", "--config", &config, "search", "boat engine"]);
    assert_eq!(
        stdout(&found),
        "projects/boat.md:1: The engine was serviced in April.\n"
    );

    // The service fails: keywords still work, status says why.
    std::fs::write(
        env.path().join("home/memory/global.md"),
        "- The server is atlas\n",
    )
    .unwrap();
    fake.fail_next(503, None);
    let status = env.run(&["memory", "--config", &config, "status"]);
    assert!(
        stdout(&status).contains("2 of 3 chunks embedded"),
        "{}",
        stdout(&status)
    );
    assert!(stdout(&status).contains("warning  the embedder failed, so search uses keywords where vectors are missing: openai embeddings: HTTP 503"), "{}", stdout(&status));
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// An editor for `flynn memory edit`: a shell script that runs `body`
/// with the file to edit as `$1`.
fn editor(env: &Env, name: &str, body: &str) -> String {
    let path = env.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    path.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn memory_in_postgresql_is_imported_shared_edited_and_exported() {
    let database = flynn_testkit::postgres::TestDatabase::create().await;
    let first = Env::new();
    let second = Env::new();
    with_memory(&first);
    let config = first.path().join("flynn.yaml");
    std::fs::write(&config, format!("sessions:\n  url: {}\n", database.url())).unwrap();
    let config = config.to_str().unwrap().to_owned();
    let files = first.path().join("home/memory");
    let files = files.to_str().unwrap();

    // Files left on disk are named, with the command that moves them in.
    let before = first.run(&["memory", "status", "--config", &config]);
    assert!(
        stderr(&before).contains(&format!("move them in with `flynn memory import {files}`")),
        "{}",
        stderr(&before)
    );
    // Moved in from the files of a single daemon.
    let imported = first.run(&["memory", "import", "--config", &config, files]);
    assert_eq!(imported.status.code(), Some(0), "{}", stderr(&imported));
    assert!(
        stdout(&imported).ends_with(": 2 added, 0 replaced\n"),
        "{}",
        stdout(&imported)
    );
    assert!(!stdout(&imported).contains("flynn-test"), "password shown");
    // Imported again: nothing to do; and no more warning.
    let again = first.run(&["memory", "import", "--config", &config, files]);
    assert!(
        !stderr(&again).contains("are not used"),
        "{}",
        stderr(&again)
    );
    assert!(
        stdout(&again).ends_with(": 0 added, 0 replaced\n"),
        "{}",
        stdout(&again)
    );

    // Another machine (its own home) on the same database sees it all.
    let status = second.run(&["memory", "status", "--config", &config]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let text = stdout(&status);
    assert!(
        text.starts_with("memory   in the session database, postgres://flynn:***@"),
        "{text}"
    );
    assert!(
        text.contains("\nindex    its memory_* tables (") && text.contains("2 files, 2 chunks\n"),
        "{text}"
    );
    assert!(
        text.contains("search   keywords only (PostgreSQL full-text search)"),
        "{text}"
    );
    let found = second.run(&["memory", "search", "--config", &config, "peanut allergy"]);
    assert_eq!(
        stdout(&found),
        "user.md:3-4: - Name: Dana - Allergic to peanuts\n"
    );

    // Edited there in an editor; the first machine reads the edit.
    let append = editor(
        &second,
        "append.sh",
        "printf -- '- Likes sailing\\n' >> \"$1\"",
    );
    let edited = second
        .command(&["memory", "edit", "--config", &config, "user"])
        .env("EDITOR", &append)
        .output()
        .unwrap();
    assert_eq!(edited.status.code(), Some(0), "{}", stderr(&edited));
    assert!(
        stdout(&edited).starts_with("user: saved (60 bytes, version "),
        "{}",
        stdout(&edited)
    );
    let shown = first.run(&["memory", "show", "--config", &config, "user"]);
    assert_eq!(
        stdout(&shown),
        "# About\n\n- Name: Dana\n- Allergic to peanuts\n- Likes sailing\n"
    );
    let found = first.run(&["memory", "search", "--config", &config, "sailing"]);
    assert_eq!(
        stdout(&found),
        "user.md:3-5: - Name: Dana - Allergic to peanuts - Likes sailing\n"
    );
    // An editor that changes nothing saves nothing.
    let unchanged = second
        .command(&["memory", "edit", "--config", &config, "user"])
        .env("EDITOR", "true")
        .output()
        .unwrap();
    assert_eq!(stdout(&unchanged), "user: unchanged\n");

    // Someone else changes the file while it is open: nothing is saved,
    // and the edit is kept in a file the message names.
    let theirs = first.path().join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("user.md"), "- Moved to Porto\n").unwrap();
    let racing = editor(
        &second,
        "racing.sh",
        &format!(
            "\"{}\" memory import --replace --config \"{config}\" \"{}\" >/dev/null\nprintf -- '- mine\\n' >> \"$1\"",
            env!("CARGO_BIN_EXE_flynn"),
            theirs.display()
        ),
    );
    let lost = second
        .command(&["memory", "edit", "--config", &config, "user"])
        .env("VISUAL", &racing)
        .output()
        .unwrap();
    assert_eq!(lost.status.code(), Some(1), "{}", stderr(&lost));
    let message = stderr(&lost);
    assert!(message.contains("changed since it was read"), "{message}");
    let kept = message
        .trim_end()
        .rsplit("your text is in ")
        .next()
        .unwrap()
        .to_owned();
    assert!(
        std::fs::read_to_string(&kept)
            .unwrap()
            .ends_with("- Likes sailing\n- mine\n"),
        "{kept}"
    );
    let shown = first.run(&["memory", "show", "--config", &config, "user"]);
    assert_eq!(stdout(&shown), "- Moved to Porto\n");

    // Exported as files again; a directory with files is not written into
    // unless asked.
    let out = second.path().join("export");
    let exported = second.run(&[
        "memory",
        "export",
        "--config",
        &config,
        out.to_str().unwrap(),
    ]);
    assert_eq!(exported.status.code(), Some(0), "{}", stderr(&exported));
    assert!(
        stdout(&exported).starts_with("exported 2 files ("),
        "{}",
        stdout(&exported)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("user.md")).unwrap(),
        "- Moved to Porto\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("projects/boat.md")).unwrap(),
        "The engine was serviced in April.\n"
    );
    let refused = second.run(&[
        "memory",
        "export",
        "--config",
        &config,
        out.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));

    // Importing files that differ from memory is refused, nothing written.
    let conflict = first.run(&["memory", "import", "--config", &config, files]);
    assert_eq!(conflict.status.code(), Some(1), "{}", stderr(&conflict));
    assert!(
        stderr(&conflict).contains("memory already has other content in user.md; nothing imported"),
        "{}",
        stderr(&conflict)
    );
    let shown = first.run(&["memory", "show", "--config", &config, "user"]);
    assert_eq!(stdout(&shown), "- Moved to Porto\n");
}
