//! The memory files: plain markdown under one directory, which a person
//! may read and edit with any editor. Writes are atomic, and a replace
//! never silently overwrites a file that changed since it was read.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::namespace::Namespace;
use crate::{Error, Result};

/// Largest memory file written, in bytes.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// A memory file's content hash, short hex: what `memory.read` reports and
/// a replace must name.
pub fn version_of(content: &str) -> String {
    let digest = Sha256::digest(content.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// One memory file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryFile {
    pub namespace: Namespace,
    pub path: PathBuf,
    pub content: String,
    /// See [`version_of`].
    pub version: String,
}

/// How a write changes a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Adds the text at the end, on a line of its own.
    Append,
    /// Replaces the whole file. `expected` is the version that was read;
    /// a file with content is only replaced when it still has it.
    Replace { expected: Option<String> },
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub namespace: Namespace,
    pub path: PathBuf,
    /// The file's version after the write.
    pub version: String,
    /// The file's size after the write, in bytes.
    pub bytes: usize,
    /// Whether the file was created by this write.
    pub created: bool,
}

/// A memory file found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub namespace: Namespace,
    /// Relative to the memory directory, `/`-separated.
    pub relative: String,
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub modified_ns: i64,
}

/// The memory directory.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    dir: PathBuf,
    // Writes of this process go one at a time, so two appends never
    // interleave and a replace's version check holds until it renames.
    write_lock: Arc<tokio::sync::Mutex<()>>,
}

impl MemoryStore {
    /// The directory need not exist; the first write creates it.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        MemoryStore {
            dir: dir.into(),
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_of(&self, namespace: &Namespace) -> PathBuf {
        self.dir.join(namespace.relative_path())
    }

    /// The file, or `None` when it does not exist.
    pub async fn read(&self, namespace: &Namespace) -> Result<Option<MemoryFile>> {
        let path = self.path_of(namespace);
        let namespace = namespace.clone();
        blocking(move || read_file(namespace, path)).await
    }

    /// Appends to or replaces a file, creating it and its directories
    /// when missing.
    pub async fn write(
        &self,
        namespace: &Namespace,
        text: &str,
        mode: WriteMode,
    ) -> Result<Written> {
        let _guard = self.write_lock.lock().await;
        let path = self.path_of(namespace);
        let namespace = namespace.clone();
        let text = text.to_owned();
        blocking(move || write_file(namespace, path, text, mode)).await
    }

    /// Every memory file, sorted by path. Hidden entries (a `.git`
    /// directory, editor swap files) and files that are not `.md` are
    /// skipped.
    pub async fn list(&self) -> Result<Vec<FileEntry>> {
        let dir = self.dir.clone();
        blocking(move || list_files(&dir)).await
    }
}

async fn blocking<T: Send + 'static>(
    job: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(job).await {
        Ok(result) => result,
        Err(error) => Err(Error::Io {
            path: PathBuf::new(),
            source: std::io::Error::other(format!("memory file task failed: {error}")),
        }),
    }
}

fn read_file(namespace: Namespace, path: PathBuf) -> Result<Option<MemoryFile>> {
    match fs::read(&path) {
        Ok(bytes) => {
            let content = String::from_utf8_lossy(&bytes).into_owned();
            Ok(Some(MemoryFile {
                version: version_of(&content),
                namespace,
                path,
                content,
            }))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Error::io(path)(error)),
    }
}

fn write_file(
    namespace: Namespace,
    path: PathBuf,
    text: String,
    mode: WriteMode,
) -> Result<Written> {
    let parent = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    create_private_dirs(&parent).map_err(Error::io(&parent))?;
    // Another process (the CLI beside the daemon) writing the same
    // directory waits for this read-modify-write to finish, so neither
    // loses the other's append.
    let _lock = lock_dir(&parent).map_err(Error::io(&parent))?;
    let expected = match mode {
        WriteMode::Append => return append_file(namespace, path, &parent, &text),
        WriteMode::Replace { expected } => expected,
    };
    let current = read_file(namespace.clone(), path.clone())?;
    let created = current.is_none();
    check_replace(&namespace, current.as_ref(), expected)?;
    let content = replacement(&namespace, text)?;
    replace_with(&parent, &path, content.as_bytes())?;
    Ok(Written {
        namespace,
        version: version_of(&content),
        bytes: content.len(),
        created,
        path,
    })
}

/// Adds `text` at the end of the file on a line of its own. The bytes
/// already there are kept as they are, even ones that are not UTF-8 (a
/// file edited by hand in another encoding).
fn append_file(namespace: Namespace, path: PathBuf, parent: &Path, text: &str) -> Result<Written> {
    let (bytes, created) = match fs::read(&path) {
        Ok(bytes) => (bytes, false),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => (Vec::new(), true),
        Err(error) => return Err(Error::io(&path)(error)),
    };
    let bytes = appended(&namespace, bytes, text)?;
    replace_with(parent, &path, &bytes)?;
    Ok(Written {
        namespace,
        version: version_of(&String::from_utf8_lossy(&bytes)),
        bytes: bytes.len(),
        created,
        path,
    })
}

/// Refuses a replace of `current` that names no version or another one
/// than `expected` (see [`WriteMode::Replace`]).
pub(crate) fn check_replace(
    namespace: &Namespace,
    current: Option<&MemoryFile>,
    expected: Option<String>,
) -> Result<()> {
    match (current, expected) {
        (Some(file), Some(expected)) if file.version != expected.trim() => Err(Error::Conflict {
            namespace: namespace.to_string(),
            current: file.version.clone(),
        }),
        (Some(file), None) if !file.content.trim().is_empty() => Err(Error::VersionRequired {
            namespace: namespace.to_string(),
            current: file.version.clone(),
        }),
        (None, Some(_)) => Err(Error::Conflict {
            namespace: namespace.to_string(),
            current: "none: the file was deleted".to_owned(),
        }),
        _ => Ok(()),
    }
}

/// What a replace with `text` writes: the text, ending with a newline.
pub(crate) fn replacement(namespace: &Namespace, mut text: String) -> Result<String> {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    within_limit(namespace, text.len())?;
    Ok(text)
}

/// `bytes` with `text` added at the end on a line of its own.
pub(crate) fn appended(namespace: &Namespace, mut bytes: Vec<u8>, text: &str) -> Result<Vec<u8>> {
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(text.trim_end_matches('\n').as_bytes());
    bytes.push(b'\n');
    within_limit(namespace, bytes.len())?;
    Ok(bytes)
}

fn within_limit(namespace: &Namespace, size: usize) -> Result<()> {
    if size > MAX_FILE_BYTES {
        return Err(Error::TooLarge {
            namespace: namespace.to_string(),
            size,
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(())
}

/// Writes `bytes` beside `path`, then renames over it and syncs the
/// directory: a reader (or a crash, or a power cut) sees the old file or
/// the new one, never half of one.
fn replace_with(parent: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut temp = tempfile_in(parent, path)?;
    temp.1
        .write_all(bytes)
        .and_then(|()| temp.1.sync_all())
        .map_err(Error::io(&temp.0))?;
    drop(temp.1);
    fs::rename(&temp.0, path).map_err(|e| {
        let _ = fs::remove_file(&temp.0);
        Error::io(path)(e)
    })?;
    #[cfg(unix)]
    fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(Error::io(parent))?;
    Ok(())
}

/// An exclusive advisory lock on `dir`, held until the handle is dropped.
#[cfg(unix)]
fn lock_dir(dir: &Path) -> std::io::Result<fs::File> {
    let handle = fs::File::open(dir)?;
    rustix::fs::flock(&handle, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(handle)
}

#[cfg(not(unix))]
fn lock_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Creates `.<name>.<pid>.<n>.tmp` next to `path`, exclusively (never
/// through a symbolic link) and readable by its owner only; hidden, so the
/// index never picks it up.
fn tempfile_in(dir: &Path, path: &Path) -> Result<(PathBuf, fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(&temp).map_err(Error::io(&temp))?;
    // The umask may only narrow the mode; this makes it exactly 0600
    // whatever the umask, through the open file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = file.set_permissions(fs::Permissions::from_mode(0o600)) {
            let _ = fs::remove_file(&temp);
            return Err(Error::io(&temp)(e));
        }
    }
    Ok((temp, file))
}

/// Creates `dir` and its missing parents as directories only their owner
/// may enter (memory is personal); existing ones are left as they are.
pub(crate) fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn list_files(dir: &Path) -> Result<Vec<FileEntry>> {
    let mut found = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    while let Some((current, depth)) = pending.pop() {
        let entries = match fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && depth == 0 => {
                return Ok(Vec::new());
            }
            Err(error) => return Err(Error::io(&current)(error)),
        };
        for entry in entries {
            let entry = entry.map_err(Error::io(&current))?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            // Follows symlinks, so a linked notes folder counts.
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if depth + 1 < 4 {
                    pending.push((path, depth + 1));
                }
                continue;
            }
            let Ok(relative) = path.strip_prefix(dir) else {
                continue;
            };
            let Some(namespace) = Namespace::from_relative(relative) else {
                continue;
            };
            let modified_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
            found.push(FileEntry {
                relative: format!("{namespace}.md"),
                namespace,
                size: meta.len(),
                modified_ns,
            });
        }
    }
    found.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str) -> Namespace {
        Namespace::parse(name).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn an_append_keeps_bytes_that_are_not_utf8() -> Result<()> {
        let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
        let store = MemoryStore::new(dir.path().join("memory"));
        store
            .write(&ns("user"), "- first", WriteMode::Append)
            .await?;
        let path = store.path_of(&ns("user"));
        // Latin-1 "café", written by an editor in another encoding.
        fs::write(&path, b"- caf\xe9\n").map_err(Error::io("x"))?;
        store.write(&ns("user"), "- thé", WriteMode::Append).await?;
        assert_eq!(
            fs::read(&path).map_err(Error::io("x"))?,
            b"- caf\xe9\n- th\xc3\xa9\n"
        );
        Ok(())
    }

    /// Two stores on one directory stand for two processes (the daemon
    /// and the CLI): each has its own in-process lock, so only the lock
    /// on the directory keeps their appends from overwriting each other.
    #[test]
    fn appends_from_two_processes_are_all_kept() -> Result<()> {
        let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
        let root = dir.path().join("memory");
        let rounds = 50;
        std::thread::scope(|scope| {
            for who in ["daemon", "cli"] {
                let root = root.clone();
                scope.spawn(move || {
                    for n in 0..rounds {
                        let store = MemoryStore::new(&root);
                        let path = store.path_of(&ns("user"));
                        let written =
                            write_file(ns("user"), path, format!("- {who} {n}"), WriteMode::Append);
                        assert!(written.is_ok(), "{written:?}");
                    }
                });
            }
        });
        let text = fs::read_to_string(root.join("user.md")).map_err(Error::io("x"))?;
        for who in ["daemon", "cli"] {
            for n in 0..rounds {
                assert!(
                    text.contains(&format!("- {who} {n}\n")),
                    "{who} {n} lost:\n{text}"
                );
            }
        }
        Ok(())
    }

    #[tokio::test]
    async fn append_creates_then_adds_lines() -> Result<()> {
        let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
        let store = MemoryStore::new(dir.path().join("memory"));
        let first = store
            .write(&ns("user"), "- likes tea", WriteMode::Append)
            .await?;
        assert!(first.created);
        fs::write(store.path_of(&ns("user")), "- likes tea\n- edited by hand")
            .map_err(Error::io("x"))?;
        let second = store
            .write(&ns("user"), "- lives in Oslo\n", WriteMode::Append)
            .await?;
        assert!(!second.created);
        let file = store.read(&ns("user")).await?.map(|f| f.content);
        assert_eq!(
            file.as_deref(),
            Some("- likes tea\n- edited by hand\n- lives in Oslo\n")
        );
        Ok(())
    }

    #[tokio::test]
    async fn replace_needs_the_version_that_was_read() -> Result<()> {
        let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
        let store = MemoryStore::new(dir.path());
        let user = ns("user");
        store
            .write(&user, "old", WriteMode::Replace { expected: None })
            .await?;
        let read = store
            .read(&user)
            .await?
            .map(|f| f.version)
            .unwrap_or_default();
        // Without a version: refused, the file unchanged.
        let refused = store
            .write(&user, "new", WriteMode::Replace { expected: None })
            .await;
        assert!(
            matches!(refused, Err(Error::VersionRequired { .. })),
            "{refused:?}"
        );
        // Someone edits the file meanwhile: the stale version is refused.
        fs::write(store.path_of(&user), "edited\n").map_err(Error::io("x"))?;
        let stale = store
            .write(
                &user,
                "new",
                WriteMode::Replace {
                    expected: Some(read),
                },
            )
            .await;
        assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
        let content = store.read(&user).await?.map(|f| f.content);
        assert_eq!(content.as_deref(), Some("edited\n"));
        // With the current version it goes through.
        let current = version_of("edited\n");
        let done = store
            .write(
                &user,
                "new",
                WriteMode::Replace {
                    expected: Some(current),
                },
            )
            .await?;
        assert_eq!(done.version, version_of("new\n"));
        Ok(())
    }

    #[tokio::test]
    async fn listing_skips_hidden_and_foreign_files() -> Result<()> {
        let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
        let store = MemoryStore::new(dir.path());
        for (path, text) in [
            ("user.md", "u"),
            ("sessions/cli_default.md", "s"),
            (".git/HEAD.md", "x"),
            ("notes.txt", "x"),
            (".user.md.swp", "x"),
            ("bad name.md", "x"),
        ] {
            let full = dir.path().join(path);
            if let Some(parent) = full.parent() {
                fs::create_dir_all(parent).map_err(Error::io(parent))?;
            }
            fs::write(&full, text).map_err(Error::io(&full))?;
        }
        let names: Vec<String> = store
            .list()
            .await?
            .into_iter()
            .map(|f| f.relative)
            .collect();
        assert_eq!(names, ["sessions/cli_default.md", "user.md"]);
        Ok(())
    }
}
