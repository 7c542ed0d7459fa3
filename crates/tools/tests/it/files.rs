//! The file tools against real files: what they do, and that nothing they
//! do escapes the workspace.

use super::*;

fn setup() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    ToolExecutor,
    ToolContext,
) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ctx = ToolContext::new(&ws);
    (dir, ws, default_executor(), ctx)
}

async fn run(executor: &ToolExecutor, ctx: &ToolContext, name: &str, args: Value) -> ToolResult {
    executor.execute(&call(name, args), ctx).await
}

#[tokio::test]
async fn write_creates_and_replaces_files_atomically_keeping_permissions() {
    let (_dir, ws, executor, ctx) = setup();
    let created = run(
        &executor,
        &ctx,
        "file.write",
        json!({"path": "src/new.txt", "content": "hello\n"}),
    )
    .await;
    assert_eq!(created, ok("created src/new.txt (6 bytes)"));
    assert_eq!(
        std::fs::read_to_string(ws.join("src/new.txt")).unwrap(),
        "hello\n"
    );

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let script = ws.join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
        let replaced = run(
            &executor,
            &ctx,
            "file.write",
            json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
        )
        .await;
        assert_eq!(replaced, ok("replaced run.sh (18 bytes, was 10)"));
        let mode = std::fs::metadata(&script).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o750);
    }
    // No temporary file is left behind.
    let leftovers: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("flynn-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let dir_target = run(
        &executor,
        &ctx,
        "file.write",
        json!({"path": "src", "content": "x"}),
    )
    .await;
    assert_eq!(dir_target, err("src is a directory; give a file path"));
}

#[tokio::test]
async fn edit_takes_the_argument_names_other_agents_use() {
    let (_dir, ws, executor, ctx) = setup();
    let file = ws.join("notes.md");
    std::fs::write(&file, "one two two\n").unwrap();
    let done = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "notes.md", "oldString": "one", "newString": "1"}),
    )
    .await;
    assert_eq!(done, ok("replaced 1 occurrence in notes.md (line 1)"));
    let done = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "notes.md", "old_string": "two", "new_string": "2", "replaceAll": true}),
    )
    .await;
    assert_eq!(done, ok("replaced 2 occurrences in notes.md (line 1)"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "1 2 2\n");
}

#[tokio::test]
async fn edit_replaces_exactly_one_match_and_explains_missing_or_ambiguous_ones() {
    let (_dir, ws, executor, ctx) = setup();
    let file = ws.join("lib.rs");
    std::fs::write(
        &file,
        "fn a() {\n    let x = 1;\n}\nfn b() {\n    let x = 1;\n}\n",
    )
    .unwrap();

    let ambiguous = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "let x = 1;", "new": "let x = 2;"}),
    )
    .await;
    assert_eq!(
        ambiguous,
        err(
            "old matches 2 places in lib.rs (lines 2, 5); add surrounding text so it matches once, or set replace_all"
        )
    );
    let one = run(&executor, &ctx, "file.edit", json!({"path": "lib.rs", "old": "fn b() {\n    let x = 1;", "new": "fn b() {\n    let x = 3;"})).await;
    assert_eq!(one, ok("replaced 1 occurrence in lib.rs (line 4)"));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "fn a() {\n    let x = 1;\n}\nfn b() {\n    let x = 3;\n}\n"
    );

    let spacing = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "let  x = 1;", "new": "y"}),
    )
    .await;
    assert_eq!(
        spacing,
        err(
            "old does not occur in lib.rs; text matching it apart from whitespace or line breaks is at line 2 (read the file and copy the text exactly)"
        )
    );
    let case = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "FN A()", "new": "y"}),
    )
    .await;
    assert_eq!(
        case,
        err("old does not occur in lib.rs; text matching it apart from letter case is at line 1")
    );
    let absent = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "struct S", "new": "y"}),
    )
    .await;
    assert_eq!(
        absent,
        err("old does not occur in lib.rs; read the file first and copy the text exactly")
    );
    let all = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "fn ", "new": "pub fn ", "replace_all": true}),
    )
    .await;
    assert_eq!(all, ok("replaced 2 occurrences in lib.rs (lines 1, 4)"));
    let same = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "a", "new": "a"}),
    )
    .await;
    assert_eq!(same, err("old and new are the same; nothing to change"));
    let empty = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "lib.rs", "old": "", "new": "a"}),
    )
    .await;
    assert!(empty.is_error);
}

#[tokio::test]
async fn list_respects_gitignore_hidden_files_and_globs() {
    let (_dir, ws, executor, ctx) = setup();
    for path in [
        "src/main.rs",
        "src/lib.rs",
        "docs/guide.md",
        "target/debug/out",
        ".git/config",
        "notes.txt",
    ] {
        let path = ws.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();

    let all = run(&executor, &ctx, "file.list", json!({})).await;
    assert_eq!(
        all,
        ok("docs/\ndocs/guide.md\nnotes.txt\nsrc/\nsrc/lib.rs\nsrc/main.rs")
    );
    let rust = run(&executor, &ctx, "file.list", json!({"pattern": "*.rs"})).await;
    assert_eq!(rust, ok("src/lib.rs\nsrc/main.rs"));
    let under = run(&executor, &ctx, "file.list", json!({"path": "docs"})).await;
    assert_eq!(under, ok("guide.md"));
    let by_path = run(
        &executor,
        &ctx,
        "file.list",
        json!({"pattern": "src/m*.rs"}),
    )
    .await;
    assert_eq!(by_path, ok("src/main.rs"));
    let none = run(&executor, &ctx, "file.list", json!({"pattern": "*.py"})).await;
    assert_eq!(none, ok("nothing in . matches *.py"));
    let file = run(&executor, &ctx, "file.list", json!({"path": "notes.txt"})).await;
    assert_eq!(
        file,
        err("notes.txt is a file, not a directory; use file.read")
    );
}

#[tokio::test]
async fn search_finds_regex_matches_with_a_glob_and_skips_binaries() {
    let (_dir, ws, executor, ctx) = setup();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.rs"), "fn main() {}\n// TODO: tidy\n").unwrap();
    std::fs::write(ws.join("src/b.md"), "todo list\nTODO later\n").unwrap();
    std::fs::write(ws.join("blob.bin"), b"TODO\0\x01\x02").unwrap();

    let todo = run(&executor, &ctx, "file.search", json!({"pattern": "TODO"})).await;
    assert_eq!(
        todo,
        ok("src/a.rs:2: // TODO: tidy\nsrc/b.md:2: TODO later")
    );
    let loose = run(
        &executor,
        &ctx,
        "file.search",
        json!({"pattern": "^todo", "ignore_case": true, "glob": "*.md"}),
    )
    .await;
    assert_eq!(loose, ok("src/b.md:1: todo list\nsrc/b.md:2: TODO later"));
    let one_file = run(
        &executor,
        &ctx,
        "file.search",
        json!({"pattern": "fn \\w+", "path": "src/a.rs"}),
    )
    .await;
    assert_eq!(one_file, ok("src/a.rs:1: fn main() {}"));
    let invalid = run(&executor, &ctx, "file.search", json!({"pattern": "fn ("})).await;
    assert!(invalid.is_error);
    assert!(
        invalid.content.starts_with("invalid regex: "),
        "{}",
        invalid.content
    );
    let nothing = run(&executor, &ctx, "file.search", json!({"pattern": "zebra"})).await;
    assert_eq!(nothing, ok("no matches for /zebra/ in ."));
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused_by_every_file_tool() {
    let (dir, ws, executor, ctx) = setup();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    }
    let absolute = outside.join("secret.txt").display().to_string();
    let calls = [
        ("file.read", json!({"path": "../outside/secret.txt"})),
        ("file.read", json!({"path": absolute})),
        ("file.read", json!({"path": "link.txt"})),
        (
            "file.write",
            json!({"path": "../outside/new.txt", "content": "x"}),
        ),
        (
            "file.write",
            json!({"path": "link.txt", "content": "overwritten"}),
        ),
        ("file.write", json!({"path": "out/new.txt", "content": "x"})),
        (
            "file.edit",
            json!({"path": "link.txt", "old": "secret", "new": "x"}),
        ),
        ("file.list", json!({"path": "out"})),
        ("file.list", json!({"path": ".."})),
        ("file.search", json!({"pattern": "secret", "path": "out"})),
    ];
    for (tool, args) in calls {
        let result = run(&executor, &ctx, tool, args.clone()).await;
        assert!(result.is_error, "{tool} {args}: {result:?}");
        assert!(
            result.content.contains("outside the workspace"),
            "{tool} {args}: {}",
            result.content
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.join("new.txt").exists());
    // Searching the workspace follows neither the symlinked directory nor
    // the symlinked file out of it.
    let search = run(&executor, &ctx, "file.search", json!({"pattern": "secret"})).await;
    assert_eq!(search, ok("no matches for /secret/ in ."));
}

#[tokio::test]
async fn reading_a_range_of_a_large_file_is_quick_and_the_output_capped() {
    let (_dir, ws, executor, ctx) = setup();
    let line = "0123456789".repeat(10);
    let mut text = String::with_capacity(11 * 1024 * 1024);
    for _ in 0..100_000 {
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(ws.join("big.log"), &text).unwrap();
    let started = Instant::now();
    let range = run(
        &executor,
        &ctx,
        "file.read",
        json!({"path": "big.log", "offset": 99_999, "limit": 5}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        range.content,
        format!(" 99999\t{line}\n100000\t{line}\n[lines 99999-100000 of 100000]")
    );
    let whole = run(&executor, &ctx, "file.read", json!({"path": "big.log"})).await;
    assert!(
        whole.content.len() <= 41 * 1024,
        "{} bytes",
        whole.content.len()
    );
    // Cut by the tool, not the executor, so the note says where to go on.
    assert!(!whole.content.contains("[output truncated"));
    assert!(
        whole
            .content
            .ends_with("[lines 1-379 of 100000; use offset=380 to read on]"),
        "{}",
        &whole.content[whole.content.len() - 80..]
    );
    let dir = run(&executor, &ctx, "file.read", json!({"path": "."})).await;
    assert_eq!(
        dir,
        err(". is a directory; use file.list to see what it holds")
    );
}

/// A sandboxed command can plant a symbolic link in the workspace where a
/// write's temporary file would go (the old name was
/// `.NAME.flynn-<daemon pid>.tmp`, and `$PPID` tells a command the pid);
/// the daemon's write must neither follow it nor turn the file into it.
#[cfg(unix)]
#[tokio::test]
async fn a_symlink_planted_at_a_temporary_name_does_not_redirect_a_write() {
    let (dir, ws, executor, ctx) = setup();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("bashrc");
    std::fs::write(&victim, "# the user's own\n").unwrap();
    std::fs::write(ws.join("notes.md"), "old\n").unwrap();
    let pid = std::process::id();
    for name in [
        format!(".notes.md.flynn-{pid}.tmp"),
        format!(".notes.md.{pid}.tmp"),
        ".notes.md.flynn.tmp".to_owned(),
    ] {
        std::os::unix::fs::symlink(&victim, ws.join(name)).unwrap();
    }

    let written = run(
        &executor,
        &ctx,
        "file.write",
        json!({"path": "notes.md", "content": "echo PWNED\n"}),
    )
    .await;
    assert_eq!(written, ok("replaced notes.md (11 bytes, was 4)"));
    let edited = run(
        &executor,
        &ctx,
        "file.edit",
        json!({"path": "notes.md", "old": "PWNED", "new": "fine"}),
    )
    .await;
    assert_eq!(edited, ok("replaced 1 occurrence in notes.md (line 1)"));

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "# the user's own\n"
    );
    let notes = ws.join("notes.md");
    assert!(
        std::fs::symlink_metadata(&notes).unwrap().is_file(),
        "notes.md is no longer a regular file"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "echo fine\n");
}

/// Makes a named pipe (nothing ever writes to it).
#[cfg(target_os = "linux")]
fn fifo(path: &Path) {
    use rustix::fs::{CWD, FileType, Mode};
    rustix::fs::mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
}

/// Runs a tool, failing the test (rather than hanging it) when the call
/// waits on the pipe. Afterwards an `open` still waiting on the pipe (a
/// call the executor gave up on) is woken by opening the other end, so
/// the runtime can shut down whatever the assertions say.
#[cfg(target_os = "linux")]
async fn run_beside_fifo(
    executor: &ToolExecutor,
    ctx: &ToolContext,
    pipe: &Path,
    name: &str,
    args: Value,
) -> ToolResult {
    use std::os::unix::fs::OpenOptionsExt;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        run(executor, ctx, name, args.clone()),
    )
    .await;
    // Opening the writing end wakes a reader waiting in `open`; closing
    // it gives a waiting `read` the end of the file. With no reader the
    // open fails, which is fine.
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(pipe),
    );
    outcome.unwrap_or_else(|_| panic!("{name} {args} waited on a named pipe"))
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn named_pipes_are_refused_without_waiting_for_a_writer() {
    let (_dir, ws, executor, ctx) = setup();
    let pipe = ws.join("pipe");
    fifo(&pipe);
    std::fs::write(ws.join("a.txt"), "needle\n").unwrap();
    let refused = err("pipe is a named pipe, not a regular file");

    let read = run_beside_fifo(&executor, &ctx, &pipe, "file.read", json!({"path": "pipe"})).await;
    assert_eq!(read, refused);
    let edit = run_beside_fifo(
        &executor,
        &ctx,
        &pipe,
        "file.edit",
        json!({"path": "pipe", "old": "a", "new": "b"}),
    )
    .await;
    assert_eq!(edit, refused);
    let named = run_beside_fifo(
        &executor,
        &ctx,
        &pipe,
        "file.search",
        json!({"pattern": "needle", "path": "pipe"}),
    )
    .await;
    assert_eq!(named, refused);
    // Walking the workspace passes the pipe by.
    let walked = run_beside_fifo(
        &executor,
        &ctx,
        &pipe,
        "file.search",
        json!({"pattern": "needle"}),
    )
    .await;
    assert_eq!(walked, ok("a.txt:1: needle"));
}
