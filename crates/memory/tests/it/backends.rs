//! The same behaviour from both places memory can live: markdown files
//! with their SQLite index, and rows of a PostgreSQL database (the test
//! server of `FLYNN_TEST_POSTGRES_URL`, a fresh database per test). Then
//! what only a shared database has: several nodes on one memory.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flynn_memory::{
    Embedder, Error, Location, Memory, Namespace, SearchMode, SearchOptions, WriteMode,
};
use flynn_testkit::postgres::TestDatabase;

use crate::ranking::{CORPUS, KEYWORD_QUERIES, mean_reciprocal_rank};
use crate::support::TestEmbedder;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Files,
    Postgres,
}

/// A memory and what keeps its storage alive.
struct Opened {
    memory: Memory,
    _dir: tempfile::TempDir,
    database: Option<TestDatabase>,
}

impl Opened {
    async fn new(kind: Kind, embedder: Option<Arc<dyn Embedder>>) -> Opened {
        let dir = tempfile::tempdir().unwrap();
        match kind {
            Kind::Files => Opened {
                memory: Memory::open(
                    dir.path().join("memory"),
                    &dir.path().join("index.db"),
                    embedder,
                )
                .await
                .unwrap(),
                _dir: dir,
                database: None,
            },
            Kind::Postgres => {
                let database = TestDatabase::create().await;
                let memory = node(&database, embedder);
                Opened {
                    memory,
                    _dir: dir,
                    database: Some(database),
                }
            }
        }
    }

    /// The same storage opened again with `embedder`, as a restarted
    /// process (or another node) would.
    async fn reopen(&self, embedder: Option<Arc<dyn Embedder>>) -> Memory {
        match (&self.database, self.memory.location()) {
            (Some(database), _) => node(database, embedder),
            (None, Location::Files { dir, index }) => {
                Memory::open(dir, &index, embedder).await.unwrap()
            }
            (None, Location::Database { .. }) => unreachable!("a database has a TestDatabase"),
        }
    }
}

/// One process's handle on the shared database.
fn node(database: &TestDatabase, embedder: Option<Arc<dyn Embedder>>) -> Memory {
    Memory::postgres(database.url(), "the test database".to_owned(), embedder).unwrap()
}

fn ns(name: &str) -> Namespace {
    Namespace::parse(name).unwrap()
}

fn files(hits: &[flynn_memory::Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| format!("{}:{}", h.file, h.start_line))
        .collect()
}

fn vectors_only() -> SearchOptions {
    SearchOptions {
        mode: SearchMode::Vector,
        ..SearchOptions::default()
    }
}

async fn writes_are_found_with_file_line_heading_and_snippet(kind: Kind) {
    let opened = Opened::new(kind, None).await;
    let memory = &opened.memory;
    let written = memory
        .write(
            &ns("user"),
            "# About\n\n- Name: Dana\n- Allergic to peanuts",
            WriteMode::Append,
        )
        .await
        .unwrap();
    assert!(written.created);
    memory
        .write(
            &ns("projects/garden"),
            "Planted tomatoes on the balcony in May.",
            WriteMode::Append,
        )
        .await
        .unwrap();

    let hits = memory
        .search("peanuts allergy?", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["user.md:3"]);
    assert_eq!(hits[0].namespace, ns("user"));
    assert_eq!(hits[0].heading.as_deref(), Some("About"));
    assert!(hits[0].snippet.contains("Allergic to peanuts"), "{hits:?}");
    assert_eq!(hits[0].keyword_rank, Some(1));
    // Stemming: "tomato" finds "tomatoes".
    let hits = memory
        .search("tomato", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["projects/garden.md:1"]);
    let hits = memory
        .search("submarine", &SearchOptions::default())
        .await
        .unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    // Search syntax of either engine is plain words here.
    for query in [
        "\"peanuts",
        "NEAR(dana",
        "dana*",
        "-dana",
        "a:b OR",
        "!& | <->",
        "",
        " ",
    ] {
        let result = memory.search(query, &SearchOptions::default()).await;
        assert!(result.is_ok(), "{query:?}: {result:?}");
    }
    assert_eq!(
        files(
            &memory
                .search("!dana & <->", &SearchOptions::default())
                .await
                .unwrap()
        ),
        ["user.md:3"]
    );
    let listed: Vec<String> = memory
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.relative)
        .collect();
    assert_eq!(listed, ["projects/garden.md", "user.md"]);
}

async fn appends_keep_lines_and_replaces_need_the_version_read(kind: Kind) {
    let opened = Opened::new(kind, None).await;
    let memory = &opened.memory;
    memory
        .write(&ns("global"), "first", WriteMode::Append)
        .await
        .unwrap();
    memory
        .write(&ns("global"), "second\n", WriteMode::Append)
        .await
        .unwrap();
    let file = memory.read(&ns("global")).await.unwrap().unwrap();
    assert_eq!(file.content, "first\nsecond\n");

    let error = memory
        .write(&ns("global"), "new", WriteMode::Replace { expected: None })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::VersionRequired { .. }), "{error}");
    let error = memory
        .write(
            &ns("global"),
            "new",
            WriteMode::Replace {
                expected: Some("000000000000".to_owned()),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Conflict { .. }), "{error}");
    let written = memory
        .write(
            &ns("global"),
            "replaced",
            WriteMode::Replace {
                expected: Some(file.version.clone()),
            },
        )
        .await
        .unwrap();
    assert!(!written.created);
    let file = memory.read(&ns("global")).await.unwrap().unwrap();
    assert_eq!(
        (file.content.as_str(), file.version),
        ("replaced\n", written.version)
    );
    // The old text is no longer found, the new one is.
    assert!(
        memory
            .search("second", &SearchOptions::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        files(
            &memory
                .search("replaced", &SearchOptions::default())
                .await
                .unwrap()
        ),
        ["global.md:1"]
    );
    let too_large = "x".repeat(flynn_memory::store::MAX_FILE_BYTES + 1);
    let error = memory
        .write(&ns("user"), &too_large, WriteMode::Append)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::TooLarge { .. }), "{error}");
    assert_eq!(memory.read(&ns("user")).await.unwrap(), None);
}

async fn vectors_find_what_keywords_miss_and_edits_reuse_them(kind: Kind) {
    let embedder = Arc::new(TestEmbedder::new("test/words", 64));
    let opened = Opened::new(kind, Some(embedder.clone())).await;
    let memory = &opened.memory;
    let section = |topic: &str| format!("## {topic}\n- {topic} fact one\n- {topic} fact two\n\n");
    let text: String = ["Alpha", "Beta", "Gamma"]
        .iter()
        .map(|t| section(t))
        .collect();
    let written = memory
        .write(&ns("global"), &text, WriteMode::Replace { expected: None })
        .await
        .unwrap();
    assert_eq!(embedder.embedded(), 3);
    let status = memory.status().await.unwrap();
    assert_eq!(
        (
            status.files,
            status.chunks,
            status.vectors,
            status.dimensions
        ),
        (1, 3, 3, Some(64))
    );
    let hits = memory.search("gamma", &vectors_only()).await.unwrap();
    assert_eq!(hits.first().map(|h| h.file.as_str()), Some("global.md"));
    assert_eq!(hits[0].heading.as_deref(), Some("Gamma"), "{hits:?}");
    assert!(hits[0].similarity.unwrap() > 0.5, "{hits:?}");

    // One changed section: one text embedded, two from the cache.
    memory
        .write(
            &ns("global"),
            &text.replace("Beta fact two", "Beta fact changed"),
            WriteMode::Replace {
                expected: Some(written.version),
            },
        )
        .await
        .unwrap();
    assert_eq!(embedder.embedded(), 4);
    assert_eq!(
        embedder.seen.lock().unwrap().last().map(String::as_str),
        Some("Beta\n- Beta fact one\n- Beta fact changed")
    );
    let report = memory.sync().await.unwrap();
    assert!(!report.changed_anything(), "{report:?}");

    // A reindex rebuilds everything from the cache alone.
    let report = memory.reindex().await.unwrap();
    assert_eq!(
        (report.embedded, report.reused, report.pending),
        (0, 3, 0),
        "{report:?}"
    );
    assert_eq!(memory.status().await.unwrap().vectors, 3);
}

async fn changing_the_embedder_rebuilds_the_vectors(kind: Kind) {
    let small = Arc::new(TestEmbedder::new("test/small", 32));
    let opened = Opened::new(kind, Some(small.clone())).await;
    opened
        .memory
        .write(
            &ns("user"),
            "- likes sailing\n\n## Work\n- writes Rust\n",
            WriteMode::Append,
        )
        .await
        .unwrap();
    let status = opened.memory.status().await.unwrap();
    assert_eq!((status.vectors, status.dimensions), (2, Some(32)));
    opened.memory.close().await;

    let large = Arc::new(TestEmbedder::new("test/large", 48));
    let memory = opened.reopen(Some(large.clone())).await;
    let report = memory.sync().await.unwrap();
    assert_eq!(report.embedded, 2, "{report:?}");
    let status = memory.status().await.unwrap();
    assert_eq!(status.embedder.as_deref(), Some("test/large"));
    assert_eq!((status.vectors, status.dimensions), (2, Some(48)));
    let hits = memory.search("sailing", &vectors_only()).await.unwrap();
    assert_eq!(files(&hits), ["user.md:1"]);

    // Without an embedder: keywords only, the vectors dropped.
    let memory = opened.reopen(None).await;
    memory.sync().await.unwrap();
    let status = memory.status().await.unwrap();
    assert_eq!((status.vectors, status.dimensions), (0, None));
    assert!(
        memory
            .search("sailing", &vectors_only())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        files(
            &memory
                .search("sailing", &SearchOptions::default())
                .await
                .unwrap()
        ),
        ["user.md:1"]
    );
}

async fn a_failing_embedder_leaves_keyword_search_working(kind: Kind) {
    let embedder = Arc::new(TestEmbedder::new("test/words", 64));
    embedder.failing.store(true, Ordering::SeqCst);
    let opened = Opened::new(kind, Some(embedder.clone())).await;
    let memory = &opened.memory;
    memory
        .write(&ns("user"), "- birthday on 3 March", WriteMode::Append)
        .await
        .unwrap();
    let report = memory.sync().await.unwrap();
    assert_eq!(report.pending, 1);
    assert!(
        report
            .embed_error
            .as_deref()
            .unwrap_or_default()
            .contains("embedder is down"),
        "{report:?}"
    );
    let hits = memory
        .search("birthday", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["user.md:1"]);
    let status = memory.status().await.unwrap();
    assert_eq!(status.vectors, 0);
    assert!(status.last_error.unwrap_or_default().contains("503"));
    // Not asked again at every search while it is down.
    let calls = embedder.calls.load(Ordering::SeqCst);
    memory
        .search("birthday", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(embedder.calls.load(Ordering::SeqCst), calls);

    embedder.failing.store(false, Ordering::SeqCst);
    let report = memory.reindex().await.unwrap();
    assert_eq!((report.pending, report.embed_error), (0, None));
    assert_eq!(memory.status().await.unwrap().vectors, 1);
}

async fn hybrid_ranks_at_least_as_well_as_keywords(kind: Kind) {
    let embedder = Arc::new(TestEmbedder::new("test/words", 128));
    let opened = Opened::new(kind, Some(embedder)).await;
    for (file, content) in CORPUS {
        let namespace = ns(file.strip_suffix(".md").unwrap());
        opened
            .memory
            .write(&namespace, content, WriteMode::Append)
            .await
            .unwrap();
    }
    let keyword = mean_reciprocal_rank(&opened.memory, KEYWORD_QUERIES, SearchMode::Keyword).await;
    let hybrid = mean_reciprocal_rank(&opened.memory, KEYWORD_QUERIES, SearchMode::Hybrid).await;
    assert!(keyword >= 0.8, "keyword MRR {keyword:.3}");
    assert!(
        hybrid >= keyword,
        "hybrid MRR {hybrid:.3} < keyword MRR {keyword:.3}"
    );
}

async fn context_is_empty_for_empty_memory(kind: Kind) {
    let opened = Opened::new(kind, None).await;
    let count = |text: &str| text.split_whitespace().count();
    assert_eq!(
        opened
            .memory
            .context("hello", 3, 500, &count)
            .await
            .unwrap(),
        None
    );
    opened
        .memory
        .write(&ns("user"), "- prefers tea", WriteMode::Append)
        .await
        .unwrap();
    let context = opened
        .memory
        .context("hello", 3, 500, &count)
        .await
        .unwrap()
        .unwrap();
    assert!(
        context.contains("## User (user.md)\n- prefers tea"),
        "{context}"
    );
}

macro_rules! on_both {
    ($($test:ident),* $(,)?) => {
        mod files {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::Kind::Files).await;
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::Kind::Postgres).await;
            })*
        }
    };
}

on_both!(
    writes_are_found_with_file_line_heading_and_snippet,
    appends_keep_lines_and_replaces_need_the_version_read,
    vectors_find_what_keywords_miss_and_edits_reuse_them,
    changing_the_embedder_rebuilds_the_vectors,
    a_failing_embedder_leaves_keyword_search_working,
    hybrid_ranks_at_least_as_well_as_keywords,
    context_is_empty_for_empty_memory,
);

#[tokio::test]
async fn nodes_on_one_database_share_memory_and_lose_no_append() {
    let database = TestDatabase::create().await;
    let embedder_a = Arc::new(TestEmbedder::new("test/words", 64));
    let embedder_b = Arc::new(TestEmbedder::new("test/words", 64));
    let a = node(&database, Some(embedder_a.clone()));
    let b = node(&database, Some(embedder_b.clone()));

    // What one node writes, the other finds at once.
    a.write(&ns("user"), "- lives in Porto", WriteMode::Append)
        .await
        .unwrap();
    let hits = b.search("porto", &SearchOptions::default()).await.unwrap();
    assert_eq!(files(&hits), ["user.md:1"]);
    assert!(hits[0].vector_rank.is_some(), "{hits:?}");
    // Embedded once, by the node that wrote it.
    assert_eq!((embedder_a.embedded(), embedder_b.embedded()), (1, 0));

    // Appends from both nodes at once to one file: every line is kept.
    let mut tasks = Vec::new();
    for (name, memory) in [("a", a.clone()), ("b", b.clone())] {
        for i in 0..20 {
            let memory = memory.clone();
            tasks.push(tokio::spawn(async move {
                memory
                    .write(
                        &Namespace::parse("daily/2026-11-28").unwrap(),
                        &format!("- note {name}{i}"),
                        WriteMode::Append,
                    )
                    .await
                    .unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let file = b.read(&ns("daily/2026-11-28")).await.unwrap().unwrap();
    let mut lines: Vec<&str> = file.content.lines().collect();
    lines.sort_unstable();
    let mut expected: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|name| (0..20).map(move |i| format!("- note {name}{i}")))
        .collect();
    expected.sort_unstable();
    assert_eq!(lines, expected);
    // Every chunk has its vector; no text was embedded twice across the
    // two nodes.
    a.sync().await.unwrap();
    b.sync().await.unwrap();
    let status = a.status().await.unwrap();
    assert_eq!(status.vectors, status.chunks, "{status:?}");
    let seen: Vec<String> = [&embedder_a, &embedder_b]
        .iter()
        .flat_map(|e| e.seen.lock().unwrap().clone())
        .collect();
    let distinct: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "a text was embedded twice");
}

#[tokio::test]
async fn the_database_refuses_what_it_cannot_hold_and_newer_tables() {
    let database = TestDatabase::create().await;
    let memory = node(&database, None);
    let error = memory
        .write(&ns("user"), "a\0b", WriteMode::Append)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("NUL"), "{error}");
    assert_eq!(memory.read(&ns("user")).await.unwrap(), None);
    memory.close().await;

    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(database.url())
        .await
        .unwrap();
    sqlx::query("UPDATE memory_meta SET value = '99' WHERE key = 'schema'")
        .execute(&mut conn)
        .await
        .unwrap();
    let error = node(&database, None).read(&ns("user")).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("newer Flynn (tables of version 99"),
        "{error}"
    );
}

#[test]
fn memory_in_a_database_is_made_outside_a_runtime_and_a_bad_url_is_named() {
    let memory = Memory::postgres("postgres://u:p@localhost/db", "db".to_owned(), None).unwrap();
    assert_eq!(
        memory.location(),
        Location::Database {
            url: "db".to_owned()
        }
    );
    let error = Memory::postgres(
        "postgres://u:p@localhost:port/db",
        "the database".to_owned(),
        None,
    )
    .unwrap_err();
    assert!(
        error.to_string().starts_with("memory in the database: "),
        "{error}"
    );
}

/// Every rewrite of a file replaces its chunks (and their vectors' sign
/// bits) with new ones; a node that kept the old bits would rank chunks
/// that are gone first and find nothing.
#[tokio::test]
async fn a_node_follows_the_vectors_other_nodes_replace() {
    let database = TestDatabase::create().await;
    let a = node(
        &database,
        Some(Arc::new(TestEmbedder::new("test/words", 64))),
    );
    let b = node(
        &database,
        Some(Arc::new(TestEmbedder::new("test/words", 64))),
    );
    let options = SearchOptions {
        limit: 1,
        ..vectors_only()
    };
    // 120 chunks of one text: as many identical sign bits, more than a
    // search takes as candidates.
    let text = "## Key\nThe spare key is under the blue flowerpot.\n\n".repeat(120);
    let rewrite = || async {
        let version = b.read(&ns("global")).await.unwrap().map(|f| f.version);
        b.write(
            &ns("global"),
            &text,
            WriteMode::Replace { expected: version },
        )
        .await
        .unwrap();
    };
    rewrite().await;
    assert_eq!(b.status().await.unwrap().vectors, 120);
    let found = |hits: Vec<flynn_memory::Hit>| hits.first().map(|h| h.file.clone());
    assert_eq!(
        found(a.search("spare key", &options).await.unwrap()).as_deref(),
        Some("global.md")
    );

    // The changes since a's last look: applied one by one.
    rewrite().await;
    assert_eq!(
        found(a.search("spare key", &options).await.unwrap()).as_deref(),
        Some("global.md")
    );

    // Changes so old that their removals were forgotten: a loads all.
    rewrite().await;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(database.url())
        .await
        .unwrap();
    sqlx::query("UPDATE memory_vector_removals SET at = now() - interval '2 hours'")
        .execute(&mut conn)
        .await
        .unwrap();
    b.write(&ns("user"), "- unrelated", WriteMode::Append)
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM memory_vector_removals")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "old removals are forgotten");
    assert_eq!(
        found(a.search("spare key", &options).await.unwrap()).as_deref(),
        Some("global.md")
    );
}
