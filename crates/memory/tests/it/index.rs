//! What only memory on disk has: the index follows hand edits, deletions
//! and renames of the files, is rebuilt when deleted or foreign, keeps
//! the files private, and is shared by two processes. (What both places
//! memory lives share is in `backends.rs`.)

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use flynn_memory::{
    Embedder, Memory, MemoryIndex, MemoryStore, Namespace, SearchOptions, WriteMode,
};

use crate::support::TestEmbedder;

fn ns(name: &str) -> Namespace {
    Namespace::parse(name).unwrap()
}

fn write(dir: &Path, relative: &str, text: &str) {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

async fn memory(dir: &Path, embedder: Option<Arc<dyn Embedder>>) -> Memory {
    Memory::open(dir.join("memory"), &dir.join("index.db"), embedder)
        .await
        .unwrap()
}

fn files(hits: &[flynn_memory::Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| format!("{}:{}", h.file, h.start_line))
        .collect()
}

#[tokio::test]
async fn the_index_follows_edits_deletions_and_renames() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Arc::new(TestEmbedder::new("test/words", 512));
    let memory = memory(dir.path(), Some(embedder.clone())).await;
    let root = dir.path().join("memory");
    write(
        &root,
        "notes/car.md",
        "The car is a blue Volvo.\n\nIt needs new tyres in spring.\n",
    );
    let report = memory.sync().await.unwrap();
    assert_eq!(
        (report.files_added, report.chunks_added),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(embedder.embedded(), 1);

    // An editor changes the file.
    write(
        &root,
        "notes/car.md",
        "The car is a red Tesla.\n\nIt needs new tyres in spring.\n",
    );
    let hits = memory
        .search("volvo", &SearchOptions::default())
        .await
        .unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    let hits = memory
        .search("tesla", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["notes/car.md:1"]);

    // Renamed: found under the new name, and its vectors come from the
    // cache (same text), not the embedder.
    let before = embedder.embedded();
    std::fs::rename(root.join("notes/car.md"), root.join("vehicles.md")).unwrap();
    let report = memory.sync().await.unwrap();
    assert_eq!(
        (report.files_added, report.files_removed),
        (1, 1),
        "{report:?}"
    );
    assert_eq!((report.embedded, report.reused), (0, 1), "{report:?}");
    assert_eq!(embedder.embedded(), before);
    let hits = memory
        .search("tesla", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["vehicles.md:1"]);

    // Deleted: gone from the index.
    std::fs::remove_file(root.join("vehicles.md")).unwrap();
    let hits = memory
        .search("tesla", &SearchOptions::default())
        .await
        .unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    let status = memory.status().await.unwrap();
    assert_eq!((status.files, status.chunks, status.vectors), (0, 0, 0));

    // A sync with nothing changed does nothing, and embeds nothing.
    write(&root, "user.md", "- prefers trains");
    memory.sync().await.unwrap();
    let calls = embedder.calls.load(Ordering::SeqCst);
    let report = memory.sync().await.unwrap();
    assert!(!report.changed_anything(), "{report:?}");
    assert_eq!(embedder.calls.load(Ordering::SeqCst), calls);
}

#[tokio::test]
async fn a_deleted_or_foreign_index_is_rebuilt_from_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("memory");
    write(&root, "global.md", "The wifi password is on the fridge.\n");
    let index_path = dir.path().join("index.db");
    {
        let index = MemoryIndex::open(&index_path, None).await.unwrap();
        index.sync(&MemoryStore::new(&root)).await.unwrap();
        index.close().await;
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", index_path.display()));
    }
    // A file that is not an index at all is refused with its path.
    std::fs::write(
        &index_path,
        "not a database, just text that is long enough to look like one",
    )
    .unwrap();
    let error = MemoryIndex::open(&index_path, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("index.db"), "{error}");
    std::fs::remove_file(&index_path).unwrap();

    let memory = memory(dir.path(), None).await;
    let hits = memory
        .search("wifi", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["global.md:1"]);
}

#[tokio::test]
async fn context_is_empty_for_empty_memory_and_capped_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let memory = memory(dir.path(), None).await;
    let count = |text: &str| text.len().div_ceil(4);
    assert_eq!(
        memory
            .context("hello there", 5, 2000, &count)
            .await
            .unwrap(),
        None
    );

    memory
        .write(
            &ns("user"),
            "- Name: Dana\n- Lives in Porto",
            WriteMode::Append,
        )
        .await
        .unwrap();
    memory
        .write(
            &ns("global"),
            "- The home server is called atlas",
            WriteMode::Append,
        )
        .await
        .unwrap();
    memory
        .write(
            &ns("projects/boat"),
            "The boat engine was serviced in April by Marco.",
            WriteMode::Append,
        )
        .await
        .unwrap();
    let context = memory
        .context("when was the boat engine serviced?", 5, 2000, &count)
        .await
        .unwrap()
        .unwrap();
    assert!(context.starts_with("[Memory Context]\n"), "{context}");
    let user = context.find("Lives in Porto").unwrap();
    let global = context.find("atlas").unwrap();
    let hit = context.find("projects/boat.md:1: The boat engine").unwrap();
    assert!(user < global && global < hit, "{context}");

    // Many facts: the newest that fit, a note, and the cap held.
    let many: String = (0..400)
        .map(|i| format!("- fact {i} about the user\n"))
        .collect();
    memory
        .write(&ns("user"), &many, WriteMode::Append)
        .await
        .unwrap();
    let context = memory
        .context("boat engine", 5, 300, &count)
        .await
        .unwrap()
        .unwrap();
    assert!(count(&context) <= 300, "{} tokens", count(&context));
    assert!(context.contains("fact 399"), "{context}");
    assert!(!context.contains("fact 0 "), "{context}");
    assert!(context.contains("[older lines left out: memory.read user shows them]"));
}

/// Memory is personal: the files, the directories made for them and the
/// index (which holds their text) are private to the user running Flynn,
/// whatever the umask.
#[cfg(unix)]
#[tokio::test]
async fn memory_files_directories_and_index_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let memory = memory(&home, None).await;
    memory
        .write(&ns("user"), "- likes tea", WriteMode::Append)
        .await
        .unwrap();
    memory
        .write(
            &ns("projects/garden"),
            "Tomatoes in May.",
            WriteMode::Append,
        )
        .await
        .unwrap();
    let hits = memory
        .search("tomatoes", &SearchOptions::default())
        .await
        .unwrap();
    assert_eq!(files(&hits), ["projects/garden.md:1"]);
    let root = home.join("memory");
    assert_eq!(
        [&home, &root, &root.join("projects")].map(|d| mode(d)),
        [0o700; 3]
    );
    let files_modes = [
        root.join("user.md"),
        root.join("projects/garden.md"),
        home.join("index.db"),
        home.join("index.db-wal"),
        home.join("index.db-shm"),
    ]
    .map(|f| mode(&f));
    assert_eq!(files_modes, [0o600; 5]);

    // A file someone made readable by all is private again once rewritten.
    std::fs::set_permissions(root.join("user.md"), std::fs::Permissions::from_mode(0o644)).unwrap();
    memory
        .write(&ns("user"), "- and coffee", WriteMode::Append)
        .await
        .unwrap();
    assert_eq!(mode(&root.join("user.md")), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_syncing_one_index_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("memory");
    let index_path = dir.path().join("index.db");
    // Two handles with their own connections, as the daemon and the CLI.
    let first = MemoryIndex::open(&index_path, None).await.unwrap();
    let second = MemoryIndex::open(&index_path, None).await.unwrap();
    let store = MemoryStore::new(&root);
    for round in 0..20 {
        for file in 0..5 {
            write(
                &root,
                &format!("notes/{file}.md"),
                &format!("Round {round} of file {file}: the heron fishes at dawn.\n"),
            );
        }
        let (a, b) = tokio::join!(first.sync(&store), second.sync(&store));
        assert!(a.is_ok() && b.is_ok(), "round {round}: {a:?} {b:?}");
    }
    first.close().await;
    second.close().await;
}
