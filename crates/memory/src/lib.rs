//! Flynn's memory: namespaced markdown files that are the source of truth
//! (`global.md`, `user.md`, `sessions/<id>.md`, `daily/<date>.md`...), a
//! search index in SQLite rebuilt from them (FTS5 keyword ranking plus
//! sqlite-vec similarity, merged by reciprocal rank fusion), and the
//! embedders that feed it. With a PostgreSQL session store the files are
//! rows of that database instead, searched there ([`PgMemory`]), so the
//! daemons of a cluster share one memory.
//!
//! [`Memory`] puts the pieces together: it syncs the index before every
//! search, so edits a person makes with an editor are found at once.

pub mod chunk;
pub mod embed;
mod error;
mod http;
pub mod index;
pub mod namespace;
mod postgres;
mod rank;
mod signs;
pub mod store;
pub mod vector;

use std::path::PathBuf;
use std::sync::Arc;

pub use embed::{EmbedError, EmbedInput, Embedder, HttpSettings};
pub use error::{Error, Result};
pub use index::{Hit, IndexStatus, MemoryIndex, SearchMode, SearchOptions, SyncReport};
pub use namespace::{Namespace, Scope};
pub use postgres::PgMemory;
pub use store::{FileEntry, MemoryFile, MemoryStore, WriteMode, Written, version_of};

/// Heading of the system prompt section memory fills.
pub const CONTEXT_HEADING: &str = "[Memory Context]";

/// Where memory is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Markdown files in `dir`, indexed in the SQLite file `index`.
    Files { dir: PathBuf, index: PathBuf },
    /// Rows of a PostgreSQL database (password hidden), shared by every
    /// node of a cluster.
    Database { url: String },
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Files { dir, .. } => write!(f, "{}", dir.display()),
            Location::Database { url } => write!(f, "{url}"),
        }
    }
}

/// The memory files and their search index.
#[derive(Debug, Clone)]
pub struct Memory {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    Files(Files),
    Postgres(Arc<PgMemory>),
}

#[derive(Debug, Clone)]
struct Files {
    store: MemoryStore,
    index: Arc<tokio::sync::OnceCell<MemoryIndex>>,
    index_path: PathBuf,
    embedder: Option<Arc<dyn Embedder>>,
}

impl Files {
    async fn index(&self) -> Result<&MemoryIndex> {
        self.index
            .get_or_try_init(|| MemoryIndex::open(&self.index_path, self.embedder.clone()))
            .await
    }
}

/// Counts tokens the way the caller's model does.
pub type TokenCount<'a> = &'a (dyn Fn(&str) -> usize + Sync);

impl Memory {
    /// Memory in `dir`, indexed at `index` with `embedder` (none: keyword
    /// search only).
    pub async fn open(
        dir: impl Into<PathBuf>,
        index: &std::path::Path,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Self> {
        let memory = Memory::open_lazily(dir, index, embedder);
        if let Backend::Files(files) = &memory.backend {
            files.index().await?;
        }
        Ok(memory)
    }

    /// Like [`open`](Self::open), but the index is opened on first use,
    /// so a runtime whose memory is empty never opens it.
    pub fn open_lazily(
        dir: impl Into<PathBuf>,
        index: &std::path::Path,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Self {
        Memory {
            backend: Backend::Files(Files {
                store: MemoryStore::new(dir),
                index: Arc::new(tokio::sync::OnceCell::new()),
                index_path: index.to_path_buf(),
                embedder,
            }),
        }
    }

    /// Memory in the PostgreSQL database at `url` (shown as `location`,
    /// its password hidden), connected on first use. The tables are
    /// created then when missing.
    pub fn postgres(
        url: &str,
        location: String,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Self> {
        Ok(Memory {
            backend: Backend::Postgres(Arc::new(PgMemory::open_lazily(url, location, embedder)?)),
        })
    }

    /// Where memory is kept.
    pub fn location(&self) -> Location {
        match &self.backend {
            Backend::Files(files) => Location::Files {
                dir: files.store.dir().to_path_buf(),
                index: files.index_path.clone(),
            },
            Backend::Postgres(pg) => Location::Database {
                url: pg.location().to_owned(),
            },
        }
    }

    /// The embedder that gives chunks their vectors, if any.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        match &self.backend {
            Backend::Files(files) => files.embedder.as_ref(),
            Backend::Postgres(pg) => pg.embedder(),
        }
    }

    /// A memory file, or `None` when it does not exist.
    pub async fn read(&self, namespace: &Namespace) -> Result<Option<MemoryFile>> {
        match &self.backend {
            Backend::Files(files) => files.store.read(namespace).await,
            Backend::Postgres(pg) => pg.read(namespace).await,
        }
    }

    /// Every memory file, sorted by path.
    pub async fn list(&self) -> Result<Vec<FileEntry>> {
        match &self.backend {
            Backend::Files(files) => files.store.list().await,
            Backend::Postgres(pg) => pg.list().await,
        }
    }

    /// Closes the index (or the database connections) if opened.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Files(files) => {
                if let Some(index) = files.index.get() {
                    index.close().await;
                }
            }
            Backend::Postgres(pg) => pg.close().await,
        }
    }

    /// Brings the index up to date with the files.
    pub async fn sync(&self) -> Result<SyncReport> {
        match &self.backend {
            Backend::Files(files) => files.index().await?.sync(&files.store).await,
            Backend::Postgres(pg) => pg.sync().await,
        }
    }

    /// Rebuilds the index from the files.
    pub async fn reindex(&self) -> Result<SyncReport> {
        match &self.backend {
            Backend::Files(files) => files.index().await?.reindex(&files.store).await,
            Backend::Postgres(pg) => pg.reindex().await,
        }
    }

    /// What the index holds, for `flynn memory status`.
    pub async fn status(&self) -> Result<IndexStatus> {
        match &self.backend {
            Backend::Files(files) => files.index().await?.status().await,
            Backend::Postgres(pg) => pg.status().await,
        }
    }

    /// Syncs, then searches.
    pub async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<Hit>> {
        if let Err(error) = self.sync().await {
            // A file that cannot be read should not stop search over the
            // rest.
            tracing::warn!(%error, "memory index not synced before search");
        }
        self.search_indexed(query, options).await
    }

    /// Searches the index as it is, without syncing it first (edits made
    /// outside Flynn since the last sync are not seen).
    pub async fn search_indexed(&self, query: &str, options: &SearchOptions) -> Result<Vec<Hit>> {
        match &self.backend {
            Backend::Files(files) => files.index().await?.search(query, options).await,
            Backend::Postgres(pg) => pg.search(query, options).await,
        }
    }

    /// Appends or replaces a file, then indexes it (a failing index is
    /// logged: the file, which is the truth, was written).
    pub async fn write(
        &self,
        namespace: &Namespace,
        text: &str,
        mode: WriteMode,
    ) -> Result<Written> {
        let written = match &self.backend {
            Backend::Files(files) => files.store.write(namespace, text, mode).await?,
            Backend::Postgres(pg) => pg.write(namespace, text, mode).await?,
        };
        if let Err(error) = self.sync().await {
            tracing::warn!(%error, "memory written but not indexed yet");
        }
        Ok(written)
    }

    /// The `[Memory Context]` section for a message: `user.md`, then
    /// `global.md` (each the newest part that fits), then the best search
    /// hits for the message from the other files, all within `budget`
    /// tokens as `count` counts them. `None` when memory has nothing to
    /// add, so a turn with empty memory carries no section at all.
    pub async fn context(
        &self,
        message: &str,
        hits: usize,
        budget: usize,
        count: TokenCount<'_>,
    ) -> Result<Option<String>> {
        // Empty memory: nothing to say, and no index to open.
        if self.list().await?.is_empty() {
            return Ok(None);
        }
        const INTRO: &str = "Your persistent memory: markdown files you keep with memory.write (memory.search and memory.read find more; tools.search offers them). Use it for continuity across conversations; it may be out of date.";
        let mut out = format!("{CONTEXT_HEADING}\n{INTRO}");
        let mut used = count(&out);
        let mut added = false;
        for (namespace, title) in [
            (Namespace::user(), "User (user.md)"),
            (Namespace::global(), "Global (global.md)"),
        ] {
            let Some(file) = self.read(&namespace).await? else {
                continue;
            };
            let content = file.content.trim();
            if content.is_empty() {
                continue;
            }
            let heading = format!("\n\n## {title}\n");
            // Each file gets at most half of what is left, so the other
            // and the hits keep room.
            let room = budget.saturating_sub(used + count(&heading)) / 2;
            let Some(body) = newest_that_fits(content, room, &namespace, count) else {
                continue;
            };
            used += count(&heading) + count(&body);
            out.push_str(&heading);
            out.push_str(&body);
            added = true;
        }
        let words = index::query_words(message);
        if hits > 0 && !words.is_empty() {
            let options = SearchOptions {
                limit: hits,
                mode: SearchMode::Hybrid,
                min_similarity: 0.3,
                exclude: vec!["user.md".to_owned(), "global.md".to_owned()],
            };
            let found = self.search(message, &options).await?;
            let mut section = String::from("\n\n## Related notes (memory.search)");
            let mut listed = 0;
            for hit in found {
                let line = format!(
                    "\n- {}:{}: {}",
                    hit.file,
                    hit.start_line,
                    hit.text.split_whitespace().collect::<Vec<_>>().join(" ")
                );
                if used + count(&section) + count(&line) > budget {
                    break;
                }
                section.push_str(&line);
                listed += 1;
            }
            if listed > 0 {
                used += count(&section);
                out.push_str(&section);
                added = true;
            }
        }
        let _ = used;
        Ok(added.then_some(out))
    }
}

/// The last lines of `content` that fit `room` tokens, with a note when
/// older lines were left out; `None` when not even the note fits.
fn newest_that_fits(
    content: &str,
    room: usize,
    namespace: &Namespace,
    count: TokenCount<'_>,
) -> Option<String> {
    if count(content) <= room {
        return Some(content.to_owned());
    }
    let note = format!("[older lines left out: memory.read {namespace} shows them]");
    let mut used = count(&note);
    if used >= room {
        return None;
    }
    let mut kept: Vec<&str> = Vec::new();
    for line in content.lines().rev() {
        let cost = count(line) + 1;
        if used + cost > room {
            break;
        }
        used += cost;
        kept.push(line);
    }
    if kept.is_empty() {
        return None;
    }
    kept.reverse();
    Some(format!("{note}\n{}", kept.join("\n")))
}
