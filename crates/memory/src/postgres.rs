//! Memory in PostgreSQL, for daemons that share one database: the files
//! are rows (`memory_files`), chunked into `memory_chunks` in the same
//! transaction that writes them, so every node searches what any node
//! wrote. Keywords are ranked by PostgreSQL's full-text search over a GIN
//! index. Vectors are kept as floats in the embedding cache and as their
//! sign bits in `memory_vectors`; each process holds the sign bits in
//! memory ([`SignCache`], brought up to date from the changes recorded
//! since it last looked), finds candidates by Hamming distance there and
//! ranks them exactly with their float vectors, as the SQLite index does.
//! No extension is needed (PostgreSQL 14 or newer).

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};

use crate::chunk::chunk;
use crate::embed::Embedder;
use crate::index::{
    Hit, IndexStatus, SearchMode, SearchOptions, SyncReport, hash_text, query_words,
};
use crate::namespace::Namespace;
use crate::rank::{ChunkRow, Health, embed_documents, fuse, hit, query_vector};
use crate::signs::{SignCache, sign_bytes};
use crate::store::{
    FileEntry, MemoryFile, WriteMode, Written, appended, check_replace, replacement, version_of,
};
use crate::vector::{from_blob, to_blob};
use crate::{Error, Result};

/// The tables' version, kept in `memory_meta`; a database written by a
/// newer Flynn is refused rather than misread.
const SCHEMA_VERSION: i64 = 1;
/// Advisory lock classes (the first key of the two-key form): one file's
/// writes, and the memory-wide work (the schema, embedding).
const LOCK_FILE: i32 = 0x666c_6d66;
const LOCK_MEMORY: i32 = 0x666c_6d6d;
/// The second key under [`LOCK_MEMORY`]: creating the tables.
const LOCK_SCHEMA: i32 = 1;
/// The second key under [`LOCK_MEMORY`]: giving chunks their vectors (one
/// node at a time, so no text is sent to the embedder twice).
const LOCK_EMBED: i32 = 2;
/// The second key under [`LOCK_MEMORY`]: changing `memory_vectors`. Held
/// from a change's sequence number to its commit, so changes commit in
/// the order of their numbers and a reader that saw change `n` has seen
/// every change before it. Always the last lock a transaction takes.
const LOCK_VECTORS: i32 = 3;
/// Recorded removals of sign bits are kept this long; a process that has
/// not looked for longer loads them all again.
const REMOVALS_KEPT: &str = "1 hour";
/// The vector scan finds this many times the candidates wanted by
/// Hamming distance of the sign bits, then ranks them exactly.
const RESCORE: usize = 3;
/// Fewest candidates ranked exactly: with few dimensions the sign bits
/// tie often.
const MIN_CANDIDATES: usize = 100;
/// Chunks read at once when giving them vectors.
const EMBED_PAGE: i64 = 256;
/// The text search configuration (stemming and stop words of English, as
/// the SQLite index's porter tokenizer).
const TEXT_SEARCH: &str = "english";

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS memory_files (\
        path text PRIMARY KEY, \
        content text NOT NULL, \
        version text NOT NULL, \
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    "CREATE TABLE IF NOT EXISTS memory_chunks (\
        id bigserial PRIMARY KEY, \
        path text NOT NULL REFERENCES memory_files(path) ON DELETE CASCADE, \
        start_line integer NOT NULL, \
        end_line integer NOT NULL, \
        heading text, \
        text text NOT NULL, \
        hash text NOT NULL, \
        body tsvector NOT NULL, \
        embedded boolean NOT NULL DEFAULT false)",
    "CREATE INDEX IF NOT EXISTS memory_chunks_body ON memory_chunks USING gin (body)",
    "CREATE INDEX IF NOT EXISTS memory_chunks_path ON memory_chunks (path)",
    "CREATE INDEX IF NOT EXISTS memory_chunks_pending ON memory_chunks (id) WHERE NOT embedded",
    // Every change to the sign bits, in commit order (see LOCK_VECTORS).
    "CREATE SEQUENCE IF NOT EXISTS memory_vector_changes",
    // Sign bits (48 bytes for 384 dimensions): what processes hold in
    // memory to find candidates.
    "CREATE TABLE IF NOT EXISTS memory_vectors (\
        chunk_id bigint PRIMARY KEY REFERENCES memory_chunks(id) ON DELETE CASCADE, \
        bits bytea NOT NULL, \
        seq bigint NOT NULL DEFAULT nextval('memory_vector_changes'))",
    "CREATE INDEX IF NOT EXISTS memory_vectors_seq ON memory_vectors (seq)",
    "CREATE TABLE IF NOT EXISTS memory_vector_removals (\
        seq bigint PRIMARY KEY DEFAULT nextval('memory_vector_changes'), \
        chunk_id bigint NOT NULL, \
        at timestamptz NOT NULL DEFAULT now())",
    "CREATE OR REPLACE FUNCTION memory_vectors_removed() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN \
       INSERT INTO memory_vector_removals (chunk_id) SELECT chunk_id FROM removed ORDER BY chunk_id; \
       RETURN NULL; \
     END $$",
    // Also when chunks go (the foreign key's cascade).
    "CREATE OR REPLACE TRIGGER memory_vectors_removed AFTER DELETE ON memory_vectors \
     REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION memory_vectors_removed()",
    "CREATE TABLE IF NOT EXISTS memory_embedding_cache (\
        embedder text NOT NULL, \
        hash text NOT NULL, \
        vector bytea NOT NULL, \
        PRIMARY KEY (embedder, hash))",
];

/// Memory kept in a PostgreSQL database.
pub struct PgMemory {
    options: PgConnectOptions,
    /// Made on first use (with the tables, when missing).
    pool: tokio::sync::OnceCell<PgPool>,
    /// The database, password hidden, for messages.
    location: String,
    embedder: Option<Arc<dyn Embedder>>,
    health: Health,
    signs: tokio::sync::Mutex<SignCache>,
}

impl std::fmt::Debug for PgMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMemory")
            .field("location", &self.location)
            .field(
                "embedder",
                &self.embedder.as_ref().map(|e| e.id().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

impl PgMemory {
    /// Memory in the database at `url`, shown as `location` (its password
    /// hidden). Nothing is connected until first use.
    pub fn open_lazily(
        url: &str,
        location: String,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Self> {
        let options = PgConnectOptions::from_str(url).map_err(|source| Error::Database {
            location: location.clone(),
            source,
        })?;
        Ok(PgMemory {
            options,
            pool: tokio::sync::OnceCell::new(),
            location,
            embedder,
            health: Health::default(),
            signs: tokio::sync::Mutex::new(SignCache::default()),
        })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    fn fail(&self) -> impl Fn(sqlx::Error) -> Error + '_ {
        move |source| Error::Database {
            location: self.location.clone(),
            source,
        }
    }

    /// The pool, once the tables exist.
    async fn ready(&self) -> Result<&PgPool> {
        self.pool
            .get_or_try_init(|| async {
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .min_connections(0)
                    .idle_timeout(std::time::Duration::from_secs(60))
                    .connect_lazy_with(self.options.clone());
                self.prepare_schema(&pool).await?;
                Ok(pool)
            })
            .await
    }

    async fn prepare_schema(&self, pool: &PgPool) -> Result<()> {
        let mut tx = pool.begin().await.map_err(self.fail())?;
        // Processes starting together create the tables once.
        self.lock(&mut tx, LOCK_SCHEMA).await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS memory_meta (key text PRIMARY KEY, value text NOT NULL)",
        )
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        let version: Option<String> =
            sqlx::query_scalar("SELECT value FROM memory_meta WHERE key = 'schema'")
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.fail())?;
        if let Some(version) = version {
            let version: i64 = version.parse().unwrap_or(i64::MAX);
            if version > SCHEMA_VERSION {
                return Err(Error::Schema {
                    location: self.location.clone(),
                    found: version,
                    known: SCHEMA_VERSION,
                });
            }
            if version == SCHEMA_VERSION {
                return tx.commit().await.map_err(self.fail());
            }
        }
        for statement in SCHEMA {
            sqlx::query(*statement)
                .execute(&mut *tx)
                .await
                .map_err(self.fail())?;
        }
        sqlx::query(
            "INSERT INTO memory_meta (key, value) VALUES ('schema', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(SCHEMA_VERSION.to_string())
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        tx.commit().await.map_err(self.fail())
    }

    /// The file, or `None` when it does not exist.
    pub async fn read(&self, namespace: &Namespace) -> Result<Option<MemoryFile>> {
        let pool = self.ready().await?;
        let content: Option<String> =
            sqlx::query_scalar("SELECT content FROM memory_files WHERE path = $1")
                .bind(relative(namespace))
                .fetch_optional(pool)
                .await
                .map_err(self.fail())?;
        Ok(content.map(|content| file(namespace, content)))
    }

    /// Every memory file, sorted by path.
    pub async fn list(&self) -> Result<Vec<FileEntry>> {
        let pool = self.ready().await?;
        let rows = sqlx::query(
            "SELECT path, octet_length(content)::int8 AS size, \
             (extract(epoch FROM updated_at) * 1000000000)::int8 AS modified_ns \
             FROM memory_files ORDER BY path",
        )
        .fetch_all(pool)
        .await
        .map_err(self.fail())?;
        let mut files = Vec::with_capacity(rows.len());
        for row in rows {
            let relative: String = row.try_get("path").map_err(self.fail())?;
            let Some(namespace) = Namespace::from_relative(std::path::Path::new(&relative)) else {
                continue;
            };
            let size: i64 = row.try_get("size").map_err(self.fail())?;
            files.push(FileEntry {
                namespace,
                relative,
                size: u64::try_from(size).unwrap_or(0),
                modified_ns: row.try_get("modified_ns").map_err(self.fail())?,
            });
        }
        Ok(files)
    }

    /// Appends to or replaces a file, and re-chunks it for search in the
    /// same transaction. Two writers of one file, on any node, go one at
    /// a time.
    pub async fn write(
        &self,
        namespace: &Namespace,
        text: &str,
        mode: WriteMode,
    ) -> Result<Written> {
        if text.contains('\0') {
            return Err(Error::Content {
                namespace: namespace.to_string(),
                problem: "it contains a NUL character, which memory text may not".to_owned(),
            });
        }
        let pool = self.ready().await?;
        let path = relative(namespace);
        let mut tx = pool.begin().await.map_err(self.fail())?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(LOCK_FILE)
            .bind(&path)
            .execute(&mut *tx)
            .await
            .map_err(self.fail())?;
        let current: Option<String> =
            sqlx::query_scalar("SELECT content FROM memory_files WHERE path = $1")
                .bind(&path)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.fail())?;
        let created = current.is_none();
        let content = match mode {
            WriteMode::Append => {
                let bytes = appended(
                    namespace,
                    current.map(String::into_bytes).unwrap_or_default(),
                    text,
                )?;
                // Text on both sides: still text.
                String::from_utf8_lossy(&bytes).into_owned()
            }
            WriteMode::Replace { expected } => {
                let current = current.map(|content| file(namespace, content));
                check_replace(namespace, current.as_ref(), expected)?;
                replacement(namespace, text.to_owned())?
            }
        };
        let version = version_of(&content);
        sqlx::query(
            "INSERT INTO memory_files (path, content, version) VALUES ($1, $2, $3) \
             ON CONFLICT (path) DO UPDATE SET content = excluded.content, \
             version = excluded.version, updated_at = clock_timestamp()",
        )
        .bind(&path)
        .bind(&content)
        .bind(&version)
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        self.lock_vectors(&mut tx).await?;
        self.rechunk(&mut tx, &path, &content).await?;
        self.prune_removals(&mut tx).await?;
        tx.commit().await.map_err(self.fail())?;
        Ok(Written {
            namespace: namespace.clone(),
            path: namespace.relative_path(),
            version,
            bytes: content.len(),
            created,
        })
    }

    /// Takes the memory-wide lock `key` ([`LOCK_SCHEMA`], [`LOCK_EMBED`],
    /// [`LOCK_VECTORS`]) until `conn`'s transaction ends.
    async fn lock(&self, conn: &mut sqlx::PgConnection, key: i32) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(LOCK_MEMORY)
            .bind(key)
            .execute(conn)
            .await
            .map_err(self.fail())?;
        Ok(())
    }

    /// Takes [`LOCK_VECTORS`] until `tx` ends.
    async fn lock_vectors(&self, tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        self.lock(tx, LOCK_VECTORS).await
    }

    /// Forgets recorded removals older than [`REMOVALS_KEPT`], and says
    /// up to which change they are forgotten (a process that applied
    /// changes only before that loads everything again). Under
    /// [`LOCK_VECTORS`].
    async fn prune_removals(&self, tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH gone AS (DELETE FROM memory_vector_removals \
               WHERE at < now() - interval '{REMOVALS_KEPT}' RETURNING seq) \
             INSERT INTO memory_meta (key, value) \
             SELECT 'removals_pruned_through', max(seq)::text FROM gone HAVING max(seq) IS NOT NULL \
             ON CONFLICT (key) DO UPDATE SET value = \
               greatest(memory_meta.value::int8, excluded.value::int8)::text"
        )))
        .execute(&mut **tx)
        .await
        .map_err(self.fail())?;
        Ok(())
    }

    /// Replaces the chunks of the file at `path` with those of `content`;
    /// returns how many were removed and added. Their vectors come back
    /// from the cache at the next sync where the text is unchanged.
    async fn rechunk(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        path: &str,
        content: &str,
    ) -> Result<(usize, usize)> {
        let removed = sqlx::query("DELETE FROM memory_chunks WHERE path = $1")
            .bind(path)
            .execute(&mut **tx)
            .await
            .map_err(self.fail())?
            .rows_affected();
        let pieces = chunk(content);
        let mut starts = Vec::with_capacity(pieces.len());
        let mut ends = Vec::with_capacity(pieces.len());
        let mut headings = Vec::with_capacity(pieces.len());
        let mut texts = Vec::with_capacity(pieces.len());
        let mut hashes = Vec::with_capacity(pieces.len());
        let mut bodies = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let body = piece.indexed_text();
            starts.push(i32::try_from(piece.start_line).unwrap_or(i32::MAX));
            ends.push(i32::try_from(piece.end_line).unwrap_or(i32::MAX));
            hashes.push(hash_text(&body));
            headings.push(piece.heading);
            texts.push(piece.text);
            bodies.push(body);
        }
        let added = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO memory_chunks (path, start_line, end_line, heading, text, hash, body) \
             SELECT $1, c.start_line, c.end_line, c.heading, c.text, c.hash, \
             to_tsvector('{TEXT_SEARCH}', c.body) \
             FROM unnest($2::int4[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[]) \
             AS c(start_line, end_line, heading, text, hash, body)"
        )))
        .bind(path)
        .bind(&starts)
        .bind(&ends)
        .bind(&headings)
        .bind(&texts)
        .bind(&hashes)
        .bind(&bodies)
        .execute(&mut **tx)
        .await
        .map_err(self.fail())?
        .rows_affected();
        Ok((
            usize::try_from(removed).unwrap_or(0),
            usize::try_from(added).unwrap_or(0),
        ))
    }

    /// Gives chunks without a vector theirs (from the cache when their
    /// text was seen before). Chunks are indexed for keywords when
    /// written, so this is all a sync has to do; cheap when nothing
    /// waits: two small queries.
    pub async fn sync(&self) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        self.embed_pending(&mut report).await?;
        if report.changed_anything() {
            tracing::debug!(?report, "memory index synced");
        }
        Ok(report)
    }

    /// Re-chunks every file and gives the chunks their vectors again
    /// (from the cache where the text is unchanged), then drops cached
    /// vectors no chunk uses.
    pub async fn reindex(&self) -> Result<SyncReport> {
        let pool = self.ready().await?;
        self.health.ok();
        let mut report = SyncReport::default();
        let mut tx = pool.begin().await.map_err(self.fail())?;
        // No node embeds chunks that are being replaced.
        self.lock(&mut tx, LOCK_EMBED).await?;
        // The files first, then the vectors: the order a write takes them.
        let files = sqlx::query("SELECT path, content FROM memory_files ORDER BY path FOR UPDATE")
            .fetch_all(&mut *tx)
            .await
            .map_err(self.fail())?;
        self.lock_vectors(&mut tx).await?;
        for row in files {
            let path: String = row.try_get("path").map_err(self.fail())?;
            let content: String = row.try_get("content").map_err(self.fail())?;
            let (removed, added) = self.rechunk(&mut tx, &path, &content).await?;
            report.files_added += 1;
            report.chunks_removed += removed;
            report.chunks_added += added;
        }
        self.prune_removals(&mut tx).await?;
        tx.commit().await.map_err(self.fail())?;
        self.embed_pending(&mut report).await?;
        sqlx::query(
            "DELETE FROM memory_embedding_cache e WHERE NOT EXISTS \
             (SELECT 1 FROM memory_chunks c WHERE c.hash = e.hash)",
        )
        .execute(pool)
        .await
        .map_err(self.fail())?;
        Ok(report)
    }

    async fn meta(&self, key: &str) -> Result<Option<String>> {
        let pool = self.ready().await?;
        sqlx::query_scalar("SELECT value FROM memory_meta WHERE key = $1")
            .bind(key)
            .fetch_optional(pool)
            .await
            .map_err(self.fail())
    }

    /// Switches the vectors to the current embedder (dropping those of
    /// another), then gives pending chunks their vectors, unless another
    /// node is doing so right now.
    async fn embed_pending(&self, report: &mut SyncReport) -> Result<()> {
        let pool = self.ready().await?;
        let current = self.embedder.as_ref().map(|e| e.id().to_owned());
        if self.meta("embedder").await? != current {
            let mut tx = pool.begin().await.map_err(self.fail())?;
            self.lock(&mut tx, LOCK_EMBED).await?;
            let stored: Option<String> =
                sqlx::query_scalar("SELECT value FROM memory_meta WHERE key = 'embedder'")
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(self.fail())?;
            if stored != current {
                self.lock_vectors(&mut tx).await?;
                for statement in [
                    "DELETE FROM memory_vectors",
                    "UPDATE memory_chunks SET embedded = false WHERE embedded",
                    "DELETE FROM memory_meta WHERE key IN ('embedder', 'dimensions')",
                ] {
                    sqlx::query(statement)
                        .execute(&mut *tx)
                        .await
                        .map_err(self.fail())?;
                }
                if let Some(id) = &current {
                    sqlx::query("INSERT INTO memory_meta (key, value) VALUES ('embedder', $1)")
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(self.fail())?;
                }
            }
            tx.commit().await.map_err(self.fail())?;
        }
        let Some(embedder) = self.embedder.clone() else {
            return Ok(());
        };
        let waiting: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM memory_chunks WHERE NOT embedded)")
                .fetch_one(pool)
                .await
                .map_err(self.fail())?;
        if waiting {
            // A session lock on a connection of its own, released below
            // (or by the server when this process dies).
            let mut lock = pool.acquire().await.map_err(self.fail())?;
            let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
                .bind(LOCK_MEMORY)
                .bind(LOCK_EMBED)
                .fetch_one(&mut *lock)
                .await
                .map_err(self.fail())?;
            if locked {
                let result = self.embed_locked(pool, &embedder, report).await;
                let unlocked = sqlx::query("SELECT pg_advisory_unlock($1, $2)")
                    .bind(LOCK_MEMORY)
                    .bind(LOCK_EMBED)
                    .execute(&mut *lock)
                    .await;
                if let Err(error) = unlocked {
                    // The connection goes, and its lock with it.
                    tracing::warn!(%error, "memory embedding lock not released; closing its connection");
                    lock.detach();
                }
                result?;
            }
        }
        report.pending =
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM memory_chunks WHERE NOT embedded")
                .fetch_one(pool)
                .await
                .map_err(self.fail())?
                .try_into()
                .unwrap_or(0);
        if report.pending > 0 && report.embed_error.is_none() {
            report.embed_error = self.health.last_error();
        }
        Ok(())
    }

    async fn embed_locked(
        &self,
        pool: &PgPool,
        embedder: &Arc<dyn Embedder>,
        report: &mut SyncReport,
    ) -> Result<()> {
        let embedder_id = embedder.id().to_owned();
        let waiting = self.health.waiting();
        let batch = embedder.batch_size().max(1);
        let mut after = 0_i64;
        loop {
            let rows = sqlx::query(
                "SELECT id, hash, heading, text FROM memory_chunks \
                 WHERE NOT embedded AND id > $1 ORDER BY id LIMIT $2",
            )
            .bind(after)
            .bind(EMBED_PAGE)
            .fetch_all(pool)
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
            let hashes: Vec<&str> = pending.iter().map(|(_, hash, _)| hash.as_str()).collect();
            let cached: HashMap<String, Vec<u8>> = sqlx::query_as(
                "SELECT hash, vector FROM memory_embedding_cache \
                 WHERE embedder = $1 AND hash = ANY($2)",
            )
            .bind(&embedder_id)
            .bind(&hashes)
            .fetch_all(pool)
            .await
            .map_err(self.fail())?
            .into_iter()
            .collect();
            let mut vectors: Vec<(i64, Vec<f32>)> = Vec::with_capacity(pending.len());
            // Texts without a cached vector, each once however many
            // chunks have it, with the chunks that do.
            let mut misses: Vec<(String, String, Vec<i64>)> = Vec::new();
            let mut missing: HashMap<String, usize> = HashMap::new();
            for (id, hash, body) in pending {
                if let Some(vector) = cached.get(&hash).and_then(|blob| from_blob(blob)) {
                    vectors.push((id, vector));
                    report.reused += 1;
                    continue;
                }
                match missing.get(&hash) {
                    Some(&at) => misses[at].2.push(id),
                    None => {
                        missing.insert(hash.clone(), misses.len());
                        misses.push((hash, body, vec![id]));
                    }
                }
            }
            let mut fresh: Vec<(String, Vec<f32>)> = Vec::new();
            if !misses.is_empty() && !waiting && report.embed_error.is_none() {
                let texts: Vec<String> = misses.iter().map(|(_, body, _)| body.clone()).collect();
                let (embedded, failure) =
                    embed_documents(embedder.as_ref(), &self.health, &texts, batch).await;
                report.embed_error = failure;
                for ((hash, _, ids), vector) in misses.into_iter().zip(embedded) {
                    let Some(vector) = vector else {
                        continue;
                    };
                    for id in ids {
                        vectors.push((id, vector.clone()));
                    }
                    fresh.push((hash, vector));
                }
            }
            report.embedded += fresh.len();
            if vectors.is_empty() {
                continue;
            }
            self.store_vectors(pool, &embedder_id, &fresh, &vectors)
                .await?;
        }
        Ok(())
    }

    /// Caches `fresh` vectors by text hash and gives the chunks theirs.
    async fn store_vectors(
        &self,
        pool: &PgPool,
        embedder_id: &str,
        fresh: &[(String, Vec<f32>)],
        vectors: &[(i64, Vec<f32>)],
    ) -> Result<()> {
        let mut tx = pool.begin().await.map_err(self.fail())?;
        if !fresh.is_empty() {
            let hashes: Vec<&str> = fresh.iter().map(|(hash, _)| hash.as_str()).collect();
            let blobs: Vec<Vec<u8>> = fresh.iter().map(|(_, vector)| to_blob(vector)).collect();
            sqlx::query(
                "INSERT INTO memory_embedding_cache (embedder, hash, vector) \
                 SELECT $1, t.hash, t.vector FROM unnest($2::text[], $3::bytea[]) AS t(hash, vector) \
                 ON CONFLICT (embedder, hash) DO UPDATE SET vector = excluded.vector",
            )
            .bind(embedder_id)
            .bind(&hashes)
            .bind(&blobs)
            .execute(&mut *tx)
            .await
            .map_err(self.fail())?;
        }
        // The first vectors set the size every later one must have.
        let first = vectors.first().map_or(0, |(_, v)| v.len());
        sqlx::query(
            "INSERT INTO memory_meta (key, value) VALUES ('dimensions', $1) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(first.to_string())
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        let dimensions: String =
            sqlx::query_scalar("SELECT value FROM memory_meta WHERE key = 'dimensions'")
                .fetch_one(&mut *tx)
                .await
                .map_err(self.fail())?;
        let mut ids = Vec::with_capacity(vectors.len());
        let mut bits = Vec::with_capacity(vectors.len());
        for (id, vector) in vectors {
            if vector.len().to_string() != dimensions {
                tracing::warn!(
                    id,
                    got = vector.len(),
                    %dimensions,
                    "memory vector of the wrong size skipped"
                );
                continue;
            }
            ids.push(*id);
            bits.push(sign_bytes(vector));
        }
        // Chunks a write removed since they were read are left out by the
        // join: writes remove chunks under the same lock, so what the join
        // sees stays until this commits.
        self.lock_vectors(&mut tx).await?;
        sqlx::query(
            "INSERT INTO memory_vectors (chunk_id, bits) \
             SELECT c.id, t.bits FROM unnest($1::int8[], $2::bytea[]) AS t(id, bits) \
             JOIN memory_chunks c ON c.id = t.id \
             ON CONFLICT (chunk_id) DO UPDATE SET bits = excluded.bits, seq = excluded.seq",
        )
        .bind(&ids)
        .bind(&bits)
        .execute(&mut *tx)
        .await
        .map_err(self.fail())?;
        sqlx::query("UPDATE memory_chunks SET embedded = true WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(self.fail())?;
        tx.commit().await.map_err(self.fail())
    }

    /// Searches what is indexed (call [`sync`](Self::sync) first for
    /// vectors of the latest writes; keywords always see them).
    pub async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<Hit>> {
        let pool = self.ready().await?;
        let limit = options.limit.max(1);
        let candidates = (limit * 4 + options.exclude.len() * 8).max(24);
        let words = query_words(query);
        let mut keyword: Vec<i64> = Vec::new();
        if options.mode != SearchMode::Vector && !words.is_empty() {
            keyword = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM memory_chunks, websearch_to_tsquery('{TEXT_SEARCH}', $1) AS q \
                 WHERE body @@ q ORDER BY ts_rank(body, q) DESC, id LIMIT $2"
            )))
            // Words of letters and digits joined by `or`: nothing in them
            // is search syntax.
            .bind(words.join(" or "))
            .bind(i64::try_from(candidates).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await
            .map_err(self.fail())?;
        }
        let mut nearest: Vec<(i64, f64)> = Vec::new();
        if options.mode != SearchMode::Keyword && self.embedder.is_some() {
            let dimensions = self.meta("dimensions").await?;
            if let Some(vector) =
                query_vector(self.embedder.as_ref(), dimensions, &self.health, query).await
            {
                nearest = self.nearest(pool, &vector, candidates).await?;
            }
        }
        let ranked = fuse(&keyword, &nearest, options.min_similarity);
        let ids: Vec<i64> = ranked.iter().map(|(id, _)| *id).collect();
        let rows = sqlx::query(
            "SELECT id, path, start_line, end_line, heading, text FROM memory_chunks \
             WHERE id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(pool)
        .await
        .map_err(self.fail())?;
        let mut chunks: HashMap<i64, ChunkRow> = HashMap::with_capacity(rows.len());
        for row in rows {
            chunks.insert(
                row.try_get("id").map_err(self.fail())?,
                ChunkRow {
                    file: row.try_get("path").map_err(self.fail())?,
                    start_line: i64::from(
                        row.try_get::<i32, _>("start_line").map_err(self.fail())?,
                    ),
                    end_line: i64::from(row.try_get::<i32, _>("end_line").map_err(self.fail())?),
                    heading: row.try_get("heading").map_err(self.fail())?,
                    text: row.try_get("text").map_err(self.fail())?,
                },
            );
        }
        let mut hits = Vec::with_capacity(limit);
        for (id, fused) in ranked {
            if hits.len() >= limit {
                break;
            }
            // Removed since it was ranked: left out.
            let Some(row) = chunks.remove(&id) else {
                continue;
            };
            if options.exclude.contains(&row.file) {
                continue;
            }
            hits.extend(hit(row, fused, &words));
        }
        Ok(hits)
    }

    /// The `k` chunks nearest to `vector` (a unit vector) with their L2
    /// distance: candidates by Hamming distance of the sign bits, in the
    /// server, then ranked exactly with the float vectors.
    async fn nearest(&self, pool: &PgPool, vector: &[f32], k: usize) -> Result<Vec<(i64, f64)>> {
        let Some(embedder) = &self.embedder else {
            return Ok(Vec::new());
        };
        let wanted = (k * RESCORE).max(MIN_CANDIDATES);
        let found = {
            let mut signs = self.signs.lock().await;
            self.catch_up(pool, &mut signs).await?;
            signs.nearest(&sign_bytes(vector), wanted)
        };
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT c.id, e.vector FROM memory_chunks c \
             JOIN memory_embedding_cache e ON e.embedder = $1 AND e.hash = c.hash \
             WHERE c.id = ANY($2)",
        )
        .bind(embedder.id())
        .bind(&found)
        .fetch_all(pool)
        .await
        .map_err(self.fail())?;
        let mut seen = HashSet::with_capacity(rows.len());
        let mut scored: Vec<(i64, f64)> = Vec::with_capacity(rows.len());
        for (id, blob) in rows {
            let Some(candidate) = from_blob(&blob).filter(|c| c.len() == vector.len()) else {
                continue;
            };
            if !seen.insert(id) {
                continue;
            }
            let dot: f32 = candidate.iter().zip(vector).map(|(a, b)| a * b).sum();
            scored.push((id, (2.0 - 2.0 * f64::from(dot)).max(0.0).sqrt()));
        }
        scored.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        Ok(scored)
    }

    /// Brings the sign bits up to date: the changes after the last one
    /// applied, or everything when never loaded or when removals it has
    /// not seen were already forgotten.
    async fn catch_up(&self, pool: &PgPool, signs: &mut SignCache) -> Result<()> {
        let mut tx = pool.begin().await.map_err(self.fail())?;
        // One snapshot for the reads below.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(self.fail())?;
        let pruned: i64 = sqlx::query_scalar(
            "SELECT coalesce((SELECT value::int8 FROM memory_meta \
             WHERE key = 'removals_pruned_through'), 0)",
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(self.fail())?;
        let changes: Vec<(i64, Option<Vec<u8>>, i64)> = if signs.loaded && signs.through >= pruned {
            sqlx::query_as(
                "SELECT chunk_id, bits, seq FROM memory_vectors WHERE seq > $1 \
                 UNION ALL \
                 SELECT chunk_id, NULL, seq FROM memory_vector_removals WHERE seq > $1 \
                 ORDER BY seq",
            )
            .bind(signs.through)
            .fetch_all(&mut *tx)
            .await
            .map_err(self.fail())?
        } else {
            signs.clear();
            let last_removal: i64 =
                sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM memory_vector_removals")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(self.fail())?;
            signs.through = pruned.max(last_removal);
            signs.loaded = true;
            sqlx::query_as("SELECT chunk_id, bits, seq FROM memory_vectors ORDER BY seq")
                .fetch_all(&mut *tx)
                .await
                .map_err(self.fail())?
        };
        tx.commit().await.map_err(self.fail())?;
        for (id, bits, seq) in changes {
            match bits {
                Some(bits) => signs.put(id, &bits),
                None => signs.remove(id),
            }
            signs.through = signs.through.max(seq);
        }
        Ok(())
    }

    /// Counts for `flynn memory status`.
    pub async fn status(&self) -> Result<IndexStatus> {
        let pool = self.ready().await?;
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM memory_files) AS files, \
             (SELECT count(*) FROM memory_chunks) AS chunks, \
             (SELECT count(*) FROM memory_chunks WHERE embedded) AS vectors, \
             (SELECT count(*) FROM memory_embedding_cache) AS cached, \
             (SELECT sum(pg_total_relation_size(t))::int8 FROM unnest(ARRAY[\
                'memory_files', 'memory_chunks', 'memory_vectors', 'memory_vector_removals', \
                'memory_embedding_cache', 'memory_meta']::regclass[]) AS t) AS bytes",
        )
        .fetch_one(pool)
        .await
        .map_err(self.fail())?;
        let count = |name: &str| -> Result<usize> {
            let n: i64 = row.try_get(name).map_err(self.fail())?;
            Ok(usize::try_from(n).unwrap_or(0))
        };
        let bytes: Option<i64> = row.try_get("bytes").map_err(self.fail())?;
        Ok(IndexStatus {
            location: self.location.clone(),
            files: count("files")?,
            chunks: count("chunks")?,
            vectors: count("vectors")?,
            embedder: self.embedder.as_ref().map(|e| e.id().to_owned()),
            dimensions: self.meta("dimensions").await?.and_then(|d| d.parse().ok()),
            cached_vectors: count("cached")?,
            bytes: bytes.and_then(|b| u64::try_from(b).ok()).unwrap_or(0),
            last_error: self.health.last_error(),
        })
    }

    pub async fn close(&self) {
        if let Some(pool) = self.pool.get() {
            pool.close().await;
        }
    }
}

/// The file's path relative to the memory directory, `/`-separated: its
/// key in `memory_files`, and its path in an export.
fn relative(namespace: &Namespace) -> String {
    format!("{}.md", namespace.as_str())
}

fn file(namespace: &Namespace, content: String) -> MemoryFile {
    MemoryFile {
        namespace: namespace.clone(),
        path: namespace.relative_path(),
        version: version_of(&content),
        content,
    }
}
