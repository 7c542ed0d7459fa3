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
