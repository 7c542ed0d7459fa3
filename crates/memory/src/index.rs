//! The search index: a SQLite file derived from the memory files and
//! rebuilt from them whenever they change. Chunks are ranked by FTS5's
//! BM25 and, with an embedder, by vector distance in a sqlite-vec table;
//! the two rankings are merged by reciprocal rank fusion.
//!
//! Nothing here is the truth: deleting the index file loses nothing, the
//! next sync rebuilds it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::chunk::chunk;
use crate::embed::Embedder;
use crate::namespace::Namespace;
use crate::rank::{ChunkRow, Health, embed_documents, fuse, hit, query_vector};
use crate::store::{FileEntry, MemoryStore};
use crate::vector::{from_blob, register_sqlite_vec, to_blob};
use crate::{Error, Result};

/// Bumped when the index's tables change; an index of another version is
/// dropped and rebuilt from the files.
const SCHEMA_VERSION: i64 = 2;
/// The `k` of reciprocal rank fusion: a hit's score is the sum over the
/// rankings it appears in of `1 / (k + rank)`.
pub const RRF_K: f64 = 60.0;

/// Which rankings a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// Keywords and vectors fused; keywords alone without an embedder.
    #[default]
    Hybrid,
    /// BM25 only.
    Keyword,
    /// Vectors only (nothing without an embedder).
    Vector,
}

/// What a search looks for.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Hits returned at most.
    pub limit: usize,
    pub mode: SearchMode,
    /// A hit found only by vectors must be at least this similar (cosine)
    /// to the query; keyword matches always count.
    pub min_similarity: f64,
    /// Leave out hits in these files (`user.md`...).
    pub exclude: Vec<String>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 8,
            mode: SearchMode::Hybrid,
            min_similarity: 0.25,
            exclude: Vec::new(),
        }
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub namespace: Namespace,
    /// The file, relative to the memory directory.
    pub file: String,
    /// First and last line of the chunk, 1-based.
    pub start_line: u32,
    pub end_line: u32,
    pub heading: Option<String>,
    /// The chunk's text.
    pub text: String,
    /// A short excerpt around the first query word found.
    pub snippet: String,
    /// The fused score (higher is better).
    pub score: f64,
    /// 1-based rank in the keyword ranking, when it was there.
    pub keyword_rank: Option<u32>,
    /// 1-based rank in the vector ranking, when it was there.
    pub vector_rank: Option<u32>,
    /// Cosine similarity to the query, when vectors were searched.
    pub similarity: Option<f64>,
}

/// What one sync changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub files_added: usize,
    pub files_changed: usize,
    pub files_removed: usize,
    pub chunks_added: usize,
    pub chunks_removed: usize,
    /// Vectors computed by the embedder.
    pub embedded: usize,
    /// Vectors taken from the cache (content seen before).
    pub reused: usize,
    /// Chunks still without a vector (the embedder failed or waits).
    pub pending: usize,
    /// Why vectors are missing, when the embedder failed.
    pub embed_error: Option<String>,
}

impl SyncReport {
    pub fn changed_anything(&self) -> bool {
        self.files_added + self.files_changed + self.files_removed + self.embedded + self.reused > 0
    }
}

/// What `flynn memory status` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStatus {
    /// The index file, or the database memory is kept in.
    pub location: String,
    pub files: usize,
    pub chunks: usize,
    pub vectors: usize,
    /// The configured embedder's id; `None`: keyword search only.
    pub embedder: Option<String>,
    pub dimensions: Option<usize>,
    pub cached_vectors: usize,
    /// The index's size on disk: the file with its WAL, or memory's
    /// tables in the database.
    pub bytes: u64,
    /// The embedder's last failure, when it has not succeeded since.
    pub last_error: Option<String>,
}

/// The memory search index.
pub struct MemoryIndex {
    pool: SqlitePool,
    path: PathBuf,
    embedder: Option<Arc<dyn Embedder>>,
    sync_lock: tokio::sync::Mutex<()>,
    health: Health,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex")
            .field("path", &self.path)
            .field(
                "embedder",
                &self.embedder.as_ref().map(|e| e.id().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

struct FileRow {
    size: i64,
    modified_ns: i64,
    hash: String,
}

impl MemoryIndex {
    /// Opens (creating) the index at `path`. An index written by another
    /// version of Flynn is emptied, to be rebuilt by the next sync.
    pub async fn open(path: &Path, embedder: Option<Arc<dyn Embedder>>) -> Result<Self> {
        register_sqlite_vec();
        let fail = |source| Error::Index {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::store::create_private_dirs(dir).map_err(Error::io(dir))?;
        }
        make_private(path).map_err(Error::io(path))?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            // 512 KiB of page cache per connection, not SQLite's 2 MiB
            // (which fills as the index grows, 8 MiB over the pool): a
            // search reads a few pages.
            .pragma("cache_size", "-512");
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(fail)?;
        let index = MemoryIndex {
            pool,
            path: path.to_path_buf(),
            embedder,
            sync_lock: tokio::sync::Mutex::new(()),
            health: Health::default(),
        };
        index.prepare_schema().await?;
        Ok(index)
    }

    fn fail(&self) -> impl Fn(sqlx::Error) -> Error + '_ {
        move |source| Error::Index {
            path: self.path.clone(),
            source,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    async fn prepare_schema(&self) -> Result<()> {
        let version: i64 = sqlx::query_scalar("PRAGMA user_version")
            .fetch_one(&self.pool)
            .await
            .map_err(self.fail())?;
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.fail())?;
        for statement in [
            "DROP TABLE IF EXISTS chunks_vec",
            "DROP TABLE IF EXISTS chunks_fts",
            "DROP TABLE IF EXISTS chunks",
            "DROP TABLE IF EXISTS files",
            "DROP TABLE IF EXISTS meta",
            "DROP TABLE IF EXISTS embedding_cache",
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, modified_ns INTEGER NOT NULL, hash TEXT NOT NULL)",
            "CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, heading TEXT, text TEXT NOT NULL, hash TEXT NOT NULL, embedded INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX chunks_by_path ON chunks(path)",
            "CREATE INDEX chunks_pending ON chunks(embedded) WHERE embedded = 0",
            "CREATE VIRTUAL TABLE chunks_fts USING fts5(body, tokenize = 'porter unicode61')",
            // A rowid table: rows of kilobytes make a WITHOUT ROWID tree three
            // times the data's size.
            "CREATE TABLE embedding_cache (embedder TEXT NOT NULL, hash TEXT NOT NULL, vector BLOB NOT NULL)",
            "CREATE UNIQUE INDEX embedding_cache_key ON embedding_cache(embedder, hash)",
        ] {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(self.fail())?;
        }
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "PRAGMA user_version = {SCHEMA_VERSION}"
        )))
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        tx.commit().await.map_err(self.fail())?;
        Ok(())
    }

    async fn meta(&self, key: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT value FROM meta WHERE key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.fail())
    }

    /// Empties the index; the next sync rebuilds everything from the
    /// files (vectors come from the cache where the text is unchanged).
    pub async fn clear(&self) -> Result<()> {
        let _guard = self.sync_lock.lock().await;
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.fail())?;
        for statement in [
            "DROP TABLE IF EXISTS chunks_vec",
            "DELETE FROM chunks_fts",
            "DELETE FROM chunks",
            "DELETE FROM files",
            "DELETE FROM meta",
        ] {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(self.fail())?;
        }
        tx.commit().await.map_err(self.fail())?;
        Ok(())
    }

    /// Rebuilds the index from scratch and drops cached vectors no chunk
    /// uses any more.
    pub async fn reindex(&self, store: &MemoryStore) -> Result<SyncReport> {
        self.clear().await?;
        self.health.ok();
        let report = self.sync(store).await?;
        sqlx::query("DELETE FROM embedding_cache WHERE hash NOT IN (SELECT hash FROM chunks)")
            .execute(&self.pool)
            .await
            .map_err(self.fail())?;
        Ok(report)
    }

    /// Brings the index up to date with the files: new, changed, removed
    /// and renamed files are re-chunked, then chunks without a vector are
    /// embedded (from the cache when their text was seen before). Cheap
    /// when nothing changed: one `stat` per file.
    pub async fn sync(&self, store: &MemoryStore) -> Result<SyncReport> {
        let _guard = self.sync_lock.lock().await;
        let mut report = SyncReport::default();
        let on_disk = store.list().await?;
        let rows = sqlx::query("SELECT path, size, modified_ns, hash FROM files")
            .fetch_all(&self.pool)
            .await
            .map_err(self.fail())?;
        let mut known: HashMap<String, FileRow> = HashMap::with_capacity(rows.len());
        for row in rows {
            known.insert(
                row.try_get("path").map_err(self.fail())?,
                FileRow {
                    size: row.try_get("size").map_err(self.fail())?,
                    modified_ns: row.try_get("modified_ns").map_err(self.fail())?,
                    hash: row.try_get("hash").map_err(self.fail())?,
                },
            );
        }
        let present: HashSet<&str> = on_disk.iter().map(|f| f.relative.as_str()).collect();
        let removed: Vec<String> = known
            .keys()
            .filter(|path| !present.contains(path.as_str()))
            .cloned()
            .collect();
        let stale: Vec<FileEntry> = on_disk
            .iter()
            .filter(|file| {
                known.get(&file.relative).is_none_or(|row| {
                    row.size != i64::try_from(file.size).unwrap_or(i64::MAX)
                        || row.modified_ns != file.modified_ns
                })
            })
            .cloned()
            .collect();

        if !removed.is_empty() || !stale.is_empty() {
            let dir = store.dir().to_path_buf();
            let read = tokio::task::spawn_blocking(move || {
                stale
                    .into_iter()
                    .map(|file| {
                        let bytes = std::fs::read(dir.join(&file.relative));
                        (file, bytes)
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            let mut tx = self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(self.fail())?;
            let has_vectors = table_exists(&mut tx, "chunks_vec")
                .await
                .map_err(self.fail())?;
            for path in &removed {
                report.chunks_removed += delete_chunks(&mut tx, path, has_vectors)
                    .await
                    .map_err(self.fail())?;
                sqlx::query("DELETE FROM files WHERE path = ?")
                    .bind(path)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.fail())?;
                report.files_removed += 1;
            }
            for (file, bytes) in read {
                let bytes = match bytes {
                    Ok(bytes) => bytes,
                    // Deleted between the listing and the read: the next
                    // sync sees it gone.
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(error) => {
                        tracing::warn!(file = %file.relative, %error, "memory file not indexed");
                        continue;
                    }
                };
                let content = String::from_utf8_lossy(&bytes);
                let hash = hash_text(&content);
                let previous = known.get(&file.relative);
                if previous.is_some_and(|row| row.hash == hash) {
                    // Touched, not changed.
                } else {
                    if previous.is_some() {
                        report.chunks_removed +=
                            delete_chunks(&mut tx, &file.relative, has_vectors)
                                .await
                                .map_err(self.fail())?;
                        report.files_changed += 1;
                    } else {
                        report.files_added += 1;
                    }
                    for piece in chunk(&content) {
                        let body = piece.indexed_text();
                        let id: i64 = sqlx::query_scalar(
                            "INSERT INTO chunks (path, start_line, end_line, heading, text, hash) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                        )
                        .bind(&file.relative)
                        .bind(piece.start_line)
                        .bind(piece.end_line)
                        .bind(&piece.heading)
                        .bind(&piece.text)
                        .bind(hash_text(&body))
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(self.fail())?;
                        sqlx::query("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)")
                            .bind(id)
                            .bind(&body)
                            .execute(&mut *tx)
                            .await
                            .map_err(self.fail())?;
                        report.chunks_added += 1;
                    }
                }
                sqlx::query(
                    "INSERT INTO files (path, size, modified_ns, hash) VALUES (?, ?, ?, ?) \
                     ON CONFLICT(path) DO UPDATE SET size = excluded.size, modified_ns = excluded.modified_ns, hash = excluded.hash",
                )
                .bind(&file.relative)
                .bind(i64::try_from(file.size).unwrap_or(i64::MAX))
                .bind(file.modified_ns)
                .bind(&hash)
                .execute(&mut *tx)
                .await
                .map_err(self.fail())?;
            }
            tx.commit().await.map_err(self.fail())?;
        }

        self.embed_pending(&mut report).await?;
        if report.chunks_added + report.chunks_removed > 1_000 {
            // A big rebuild leaves a WAL as large as the index; fold it in.
            if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await
            {
                tracing::debug!(%error, "memory index checkpoint skipped");
            }
        }
        if report.changed_anything() {
            tracing::debug!(?report, "memory index synced");
        }
        Ok(report)
    }

    /// Switches the vector table to the current embedder (dropping
    /// vectors of another), then gives pending chunks their vectors.
    async fn embed_pending(&self, report: &mut SyncReport) -> Result<()> {
        let current = self.embedder.as_ref().map(|e| e.id().to_owned());
        let stored = self.meta("embedder").await?;
        if stored != current {
            let mut tx = self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(self.fail())?;
            for statement in [
                "DROP TABLE IF EXISTS chunks_vec",
                "DELETE FROM meta WHERE key IN ('embedder', 'dimensions')",
                "UPDATE chunks SET embedded = 0",
            ] {
                sqlx::query(statement)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.fail())?;
            }
            if let Some(id) = &current {
                sqlx::query("INSERT INTO meta (key, value) VALUES ('embedder', ?)")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.fail())?;
            }
            tx.commit().await.map_err(self.fail())?;
        }
        let Some(embedder) = self.embedder.clone() else {
            return Ok(());
        };
        let embedder_id = embedder.id().to_owned();
        let waiting = self.health.waiting();
        let batch = embedder.batch_size().max(1);
        let mut after = 0i64;
        loop {
            let rows = sqlx::query(
                "SELECT id, hash, heading, text FROM chunks WHERE embedded = 0 AND id > ? ORDER BY id LIMIT ?",
            )
            .bind(after)
            .bind(i64::try_from(batch.max(256)).unwrap_or(256))
            .fetch_all(&self.pool)
            .await
            .map_err(self.fail())?;
            if rows.is_empty() {
                break;
            }
            let mut pending: Vec<(i64, String, String)> = Vec::with_capacity(rows.len());
            for row in &rows {
                let id: i64 = row.try_get("id").map_err(self.fail())?;
                let heading: Option<String> = row.try_get("heading").map_err(self.fail())?;
                let text: String = row.try_get("text").map_err(self.fail())?;
                let body = match heading {
                    Some(heading) => format!("{heading}\n{text}"),
                    None => text,
                };
                pending.push((id, row.try_get("hash").map_err(self.fail())?, body));
                after = id;
            }
            // Cached vectors first.
            let mut vectors: BTreeMap<i64, Vec<f32>> = BTreeMap::new();
            let mut misses: Vec<(i64, String, String)> = Vec::new();
            for (id, hash, body) in pending {
                let cached: Option<Vec<u8>> = sqlx::query_scalar(
                    "SELECT vector FROM embedding_cache WHERE embedder = ? AND hash = ?",
                )
                .bind(&embedder_id)
                .bind(&hash)
                .fetch_optional(&self.pool)
                .await
                .map_err(self.fail())?;
                match cached.and_then(|blob| from_blob(&blob)) {
                    Some(vector) => {
                        vectors.insert(id, vector);
                        report.reused += 1;
                    }
                    None => misses.push((id, hash, body)),
                }
            }
            let mut fresh: Vec<(i64, String, Vec<f32>)> = Vec::new();
            if !misses.is_empty() && !waiting && report.embed_error.is_none() {
                let texts: Vec<String> = misses.iter().map(|(_, _, body)| body.clone()).collect();
                let (embedded, failure) =
                    embed_documents(embedder.as_ref(), &self.health, &texts, batch).await;
                report.embed_error = failure;
                for ((id, hash, _), vector) in misses.into_iter().zip(embedded) {
                    if let Some(vector) = vector {
                        fresh.push((id, hash, vector));
                    }
                }
            }
            report.embedded += fresh.len();
            if vectors.is_empty() && fresh.is_empty() {
                continue;
            }
            let mut tx = self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(self.fail())?;
            let dimensions = match vectors.values().next().or(fresh.first().map(|(_, _, v)| v)) {
                Some(vector) => vector.len(),
                None => continue,
            };
            self.ensure_vector_table(&mut tx, dimensions).await?;
            for (id, hash, vector) in &fresh {
                sqlx::query("INSERT INTO embedding_cache (embedder, hash, vector) VALUES (?, ?, ?) ON CONFLICT(embedder, hash) DO UPDATE SET vector = excluded.vector")
                    .bind(&embedder_id)
                    .bind(hash)
                    .bind(to_blob(vector))
                    .execute(&mut *tx)
                    .await
                    .map_err(self.fail())?;
                vectors.insert(*id, vector.clone());
            }
            for (id, vector) in &vectors {
                if vector.len() != dimensions {
                    tracing::warn!(
                        id,
                        got = vector.len(),
                        dimensions,
                        "memory vector of the wrong size skipped"
                    );
                    continue;
                }
                let insert = if dimensions.is_multiple_of(8) {
                    "INSERT OR REPLACE INTO chunks_vec (rowid, embedding) VALUES (?, vec_quantize_binary(?))"
                } else {
                    "INSERT OR REPLACE INTO chunks_vec (rowid, embedding) VALUES (?, ?)"
                };
                sqlx::query(insert)
                    .bind(id)
                    .bind(to_blob(vector))
                    .execute(&mut *tx)
                    .await
                    .map_err(self.fail())?;
                sqlx::query("UPDATE chunks SET embedded = 1 WHERE id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.fail())?;
            }
            tx.commit().await.map_err(self.fail())?;
        }
        report.pending =
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM chunks WHERE embedded = 0")
                .fetch_one(&self.pool)
                .await
                .map_err(self.fail())?
                .try_into()
                .unwrap_or(0);
        if report.pending > 0 && report.embed_error.is_none() {
            report.embed_error = self.health.last_error();
        }
        Ok(())
    }

    async fn ensure_vector_table(
        &self,
        tx: &mut sqlx::SqliteConnection,
        dimensions: usize,
    ) -> Result<()> {
        let stored =
            sqlx::query_scalar::<_, String>("SELECT value FROM meta WHERE key = 'dimensions'")
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.fail())?;
        if stored.as_deref() == Some(dimensions.to_string().as_str())
            && table_exists(tx, "chunks_vec").await.map_err(self.fail())?
        {
            return Ok(());
        }
        sqlx::query("DROP TABLE IF EXISTS chunks_vec")
            .execute(&mut *tx)
            .await
            .map_err(self.fail())?;
        // Sign bits when the size allows (48 bytes for 384 dimensions
        // instead of 1,536): the scan that finds candidates reads an
        // eighth of the data, and the candidates are then ranked exactly
        // with the float vectors of the cache. `dimensions` is a number,
        // not text from outside.
        let column = if dimensions.is_multiple_of(8) {
            format!("bit[{dimensions}]")
        } else {
            format!("float[{dimensions}]")
        };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding {column})"
        )))
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('dimensions', ?)")
            .bind(dimensions.to_string())
            .execute(&mut *tx)
            .await
            .map_err(self.fail())?;
        Ok(())
    }

    /// Searches the index as it is (call [`sync`](Self::sync) first to
    /// see the files' latest state).
    pub async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<Hit>> {
        let limit = options.limit.max(1);
        let candidates = (limit * 4 + options.exclude.len() * 8).max(24);
        let words = query_words(query);
        let mut keyword: Vec<i64> = Vec::new();
        if options.mode != SearchMode::Vector && !words.is_empty() {
            let expression = words
                .iter()
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" OR ");
            keyword = sqlx::query_scalar(
                "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts) LIMIT ?",
            )
            .bind(&expression)
            .bind(i64::try_from(candidates).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(self.fail())?;
        }
        let mut nearest: Vec<(i64, f64)> = Vec::new();
        if options.mode != SearchMode::Keyword
            && let Some(vector) = self.query_vector(query).await
        {
            nearest = self.nearest(&vector, candidates).await?;
        }

        let ranked = fuse(&keyword, &nearest, options.min_similarity);

        let mut hits = Vec::with_capacity(limit);
        for (id, fused) in ranked {
            if hits.len() >= limit {
                break;
            }
            let Some(row) = sqlx::query(
                "SELECT path, start_line, end_line, heading, text FROM chunks WHERE id = ?",
            )
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.fail())?
            else {
                continue;
            };
            let row = ChunkRow {
                file: row.try_get("path").map_err(self.fail())?,
                start_line: row.try_get("start_line").map_err(self.fail())?,
                end_line: row.try_get("end_line").map_err(self.fail())?,
                heading: row.try_get("heading").map_err(self.fail())?,
                text: row.try_get("text").map_err(self.fail())?,
            };
            if options.exclude.contains(&row.file) {
                continue;
            }
            hits.extend(hit(row, fused, &words));
        }
        Ok(hits)
    }

    /// The query's vector, or `None`: the search goes on with keywords.
    async fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        self.embedder.as_ref()?;
        let dimensions = self.meta("dimensions").await.ok().flatten();
        query_vector(self.embedder.as_ref(), dimensions, &self.health, query).await
    }

    /// The `k` chunks nearest to `vector`, with their L2 distance (of unit
    /// vectors). With sign-bit vectors, `RESCORE` times as many
    /// candidates are found by Hamming distance, then ranked exactly
    /// (sqlite-vec's scan costs grow with `k`: 3 ms at 10, 25 ms at 256
    /// over 100,000 chunks).
    async fn nearest(&self, vector: &[f32], k: usize) -> Result<Vec<(i64, f64)>> {
        const RESCORE: usize = 3;
        let binary = vector.len().is_multiple_of(8);
        let (sql, wanted) = if binary {
            (
                "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH vec_quantize_binary(?) AND k = ? ORDER BY distance",
                k * RESCORE,
            )
        } else {
            (
                "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ? ORDER BY distance",
                k,
            )
        };
        let rows = sqlx::query(sql)
            .bind(to_blob(vector))
            .bind(i64::try_from(wanted).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            // No vector table yet.
            Err(sqlx::Error::Database(error)) if error.message().contains("no such table") => {
                return Ok(Vec::new());
            }
            Err(error) => return Err(self.fail()(error)),
        };
        let found = rows
            .iter()
            .map(|row| Ok((row.try_get("rowid")?, row.try_get("distance")?)))
            .collect::<Result<Vec<(i64, f64)>, sqlx::Error>>()
            .map_err(self.fail())?;
        if !binary {
            return Ok(found);
        }
        let Some(embedder) = &self.embedder else {
            return Ok(Vec::new());
        };
        // Two lookups by key (a join here made SQLite scan the cache).
        let ids: Vec<i64> = found.iter().map(|(id, _)| *id).collect();
        let rows =
            sqlx::query("SELECT id, hash FROM chunks WHERE id IN (SELECT value FROM json_each(?))")
                .bind(serde_json::Value::from(ids).to_string())
                .fetch_all(&self.pool)
                .await
                .map_err(self.fail())?;
        let mut by_hash: HashMap<String, Vec<i64>> = HashMap::with_capacity(rows.len());
        for row in rows {
            by_hash
                .entry(row.try_get("hash").map_err(self.fail())?)
                .or_default()
                .push(row.try_get("id").map_err(self.fail())?);
        }
        let hashes: Vec<&String> = by_hash.keys().collect();
        let rows = sqlx::query(
            "SELECT hash, vector FROM embedding_cache WHERE embedder = ? AND hash IN (SELECT value FROM json_each(?))",
        )
        .bind(embedder.id())
        .bind(serde_json::to_string(&hashes).unwrap_or_else(|_| "[]".to_owned()))
        .fetch_all(&self.pool)
        .await
        .map_err(self.fail())?;
        let mut scored: Vec<(i64, f64)> = Vec::with_capacity(found.len());
        for row in rows {
            let hash: String = row.try_get("hash").map_err(self.fail())?;
            let blob: Vec<u8> = row.try_get("vector").map_err(self.fail())?;
            let Some(candidate) = from_blob(&blob).filter(|c| c.len() == vector.len()) else {
                continue;
            };
            let dot: f32 = candidate.iter().zip(vector).map(|(a, b)| a * b).sum();
            let distance = (2.0 - 2.0 * f64::from(dot)).max(0.0).sqrt();
            for id in by_hash.get(&hash).into_iter().flatten() {
                scored.push((*id, distance));
            }
        }
        scored.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        Ok(scored)
    }

    /// Counts for `flynn memory status`.
    pub async fn status(&self) -> Result<IndexStatus> {
        let count = |sql: &'static str| {
            let pool = self.pool.clone();
            async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await }
        };
        let files = count("SELECT count(*) FROM files")
            .await
            .map_err(self.fail())?;
        let chunks = count("SELECT count(*) FROM chunks")
            .await
            .map_err(self.fail())?;
        let vectors = count("SELECT count(*) FROM chunks WHERE embedded = 1")
            .await
            .map_err(self.fail())?;
        let cached = count("SELECT count(*) FROM embedding_cache")
            .await
            .map_err(self.fail())?;
        let dimensions = self.meta("dimensions").await?.and_then(|d| d.parse().ok());
        let mut bytes = 0;
        for suffix in ["", "-wal"] {
            let mut name = self.path.as_os_str().to_owned();
            name.push(suffix);
            bytes += std::fs::metadata(PathBuf::from(name)).map_or(0, |m| m.len());
        }
        let last_error = self.health.last_error();
        Ok(IndexStatus {
            location: self.path.display().to_string(),
            files: usize::try_from(files).unwrap_or(0),
            chunks: usize::try_from(chunks).unwrap_or(0),
            vectors: usize::try_from(vectors).unwrap_or(0),
            embedder: self.embedder.as_ref().map(|e| e.id().to_owned()),
            dimensions,
            cached_vectors: usize::try_from(cached).unwrap_or(0),
            bytes,
            last_error,
        })
    }

    /// Closes the database (checkpointing its WAL).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

async fn table_exists(tx: &mut sqlx::SqliteConnection, name: &str) -> Result<bool, sqlx::Error> {
    let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM sqlite_master WHERE name = ?")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(found.is_some())
}

async fn delete_chunks(
    tx: &mut sqlx::SqliteConnection,
    path: &str,
    has_vectors: bool,
) -> Result<usize, sqlx::Error> {
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM chunks WHERE path = ?")
        .bind(path)
        .fetch_all(&mut *tx)
        .await?;
    for id in &ids {
        sqlx::query("DELETE FROM chunks_fts WHERE rowid = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if has_vectors {
            sqlx::query("DELETE FROM chunks_vec WHERE rowid = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
    }
    sqlx::query("DELETE FROM chunks WHERE path = ?")
        .bind(path)
        .execute(&mut *tx)
        .await?;
    Ok(ids.len())
}

/// Content hash (hex) of a text.
pub(crate) fn hash_text(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Words a query is matched by: lower-case letters and digits, without
/// the most common English words (which would match every chunk).
pub fn query_words(query: &str) -> Vec<String> {
    const STOP: &[&str] = &[
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from",
        "had", "has", "have", "how", "i", "if", "in", "is", "it", "its", "me", "my", "of", "on",
        "or", "so", "that", "the", "their", "there", "this", "to", "was", "we", "what", "when",
        "where", "which", "who", "why", "will", "with", "you", "your",
    ];
    let mut words: Vec<String> = Vec::new();
    for word in query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        if STOP.contains(&word.as_str()) || words.contains(&word) {
            continue;
        }
        words.push(word);
        if words.len() == 32 {
            break;
        }
    }
    words
}

/// Creates the index file and its WAL companions (`-wal`, `-shm`) 0600
/// where missing, and takes group and other permissions off existing ones:
/// the index holds the text of every memory file.
#[cfg(unix)]
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    // Something that is not a file (a directory, say) is left for SQLite
    // to refuse, with nothing created beside it.
    if std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return Ok(());
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let name = PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&name)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mode = std::fs::metadata(&name)?.permissions().mode();
                if mode & 0o077 != 0 {
                    std::fs::set_permissions(
                        &name,
                        std::fs::Permissions::from_mode(mode & 0o7700),
                    )?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private(_path: &Path) -> std::io::Result<()> {
    Ok(())
}
