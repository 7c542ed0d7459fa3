//! Memory search at scale: hybrid search over 100,000 chunks (target: p50
//! under 20 ms), how fast the index is built from the files, and the
//! memory the index costs. The counts are written to
//! `criterion/flynn-memory.json` for `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use flynn_memory::{EmbedError, EmbedInput, Embedder, Memory, SearchMode, SearchOptions};
use serde_json::json;

const FILES: usize = 1_000;
const NOTES_PER_FILE: usize = 100;
const DIMENSIONS: usize = 384;

/// Stands in for a real embedder at no cost: a pseudo-random unit vector
/// per text, 384 dimensions like all-MiniLM-L6-v2.
#[derive(Debug)]
struct Projection;

fn seed(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn vector(text: &str) -> Vec<f32> {
    let mut state = seed(text) | 1;
    (0..DIMENSIONS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

#[async_trait]
impl Embedder for Projection {
    fn id(&self) -> &str {
        "bench/projection"
    }

    fn batch_size(&self) -> usize {
        256
    }

    async fn embed(
        &self,
        texts: &[String],
        _input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| vector(t)).collect())
    }
}

/// A vocabulary of made-up words, drawn with a Zipf-like skew (a few
/// common words, a long tail), as words are in real notes.
struct Vocabulary {
    words: Vec<String>,
    state: u64,
}

impl Vocabulary {
    fn new(size: usize) -> Self {
        const SYLLABLES: &[&str] = &[
            "ka", "lo", "mi", "ra", "te", "su", "no", "vi", "da", "pe", "zo", "ri", "ma", "tu",
            "fe", "go", "li", "ne", "bo", "sa",
        ];
        let words = (0..size)
            .map(|i| {
                let mut word = String::new();
                let mut n = i + SYLLABLES.len();
                while n > 0 {
                    word.push_str(SYLLABLES[n % SYLLABLES.len()]);
                    n /= SYLLABLES.len();
                }
                word
            })
            .collect();
        Vocabulary { words, state: 42 }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Rank `n^u - 1` for uniform `u`: log-uniform, roughly Zipf.
    fn word(&mut self) -> &str {
        let n = self.words.len() as f64;
        let rank = (n.powf(self.uniform()) - 1.0) as usize;
        &self.words[rank.min(self.words.len() - 1)]
    }

    /// A word a query would keep: not among the 100 commonest, which play
    /// the part of the stop words a query drops.
    fn content_word(&mut self) -> String {
        loop {
            let n = self.words.len() as f64;
            let rank = (n.powf(self.uniform()) - 1.0) as usize;
            if (100..self.words.len()).contains(&rank) {
                return self.words[rank].clone();
            }
        }
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn write_corpus(root: &Path, vocabulary: &mut Vocabulary) {
    for file in 0..FILES {
        let mut text = String::new();
        for note in 0..NOTES_PER_FILE {
            text.push_str(&format!("## Note {note}\n-"));
            for _ in 0..12 {
                text.push(' ');
                text.push_str(vocabulary.word());
            }
            text.push_str("\n\n");
        }
        let path = root.join(format!("notes/{:02}/file{file}.md", file % 50));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // FLYNN_BENCH_KEEP=<dir> keeps the files and the index there to look at.
    let kept = std::env::var_os("FLYNN_BENCH_KEEP").map(std::path::PathBuf::from);
    let temp = tempfile::tempdir().unwrap();
    let base = kept.unwrap_or_else(|| temp.path().to_path_buf());
    let root = base.join("memory");
    let mut vocabulary = Vocabulary::new(20_000);
    write_corpus(&root, &mut vocabulary);
    let rss_before = rss_kib();
    let memory = runtime.block_on(async {
        Memory::open(&root, &base.join("index.db"), Some(Arc::new(Projection)))
            .await
            .unwrap()
    });
    let started = Instant::now();
    let report = runtime.block_on(memory.sync()).unwrap();
    let build = started.elapsed();
    assert_eq!(report.chunks_added, FILES * NOTES_PER_FILE, "{report:?}");
    assert_eq!(report.pending, 0);

    // Queries of three words each, from the same distribution.
    let queries: Vec<String> = (0..64)
        .map(|_| {
            let words: Vec<String> = (0..3).map(|_| vocabulary.content_word()).collect();
            words.join(" ")
        })
        .collect();
    search_each_way(c, "memory", &runtime, &memory, &queries);
    let rss_after = rss_kib();
    let status = runtime.block_on(async { memory.status().await }).unwrap();
    let postgres = postgres(c, &runtime, &root, &queries);

    let stats = json!({
        "chunks": status.chunks,
        "dimensions": DIMENSIONS,
        "build_ms": build.as_millis() as u64,
        "chunks_per_second": (status.chunks as f64 / build.as_secs_f64()) as u64,
        "index_bytes": status.bytes,
        "rss_growth_kib": rss_after.saturating_sub(rss_before),
        "postgres": postgres,
    });
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        std::path::PathBuf::from,
    );
    let out = target.join("criterion");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("flynn-memory.json"), stats.to_string()).unwrap();
    println!("memory index: {stats}");
}

/// The same files and queries with memory in PostgreSQL (the server of
/// `FLYNN_TEST_POSTGRES_URL`; `cargo xtask bench` starts it): imported
/// file by file as `memory.write` does, then searched.
fn postgres(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    queries: &[String],
) -> serde_json::Value {
    if std::env::var_os("FLYNN_TEST_POSTGRES_URL").is_none() {
        println!(
            "memory in PostgreSQL not measured: FLYNN_TEST_POSTGRES_URL is not set (export FLYNN_TEST_POSTGRES_URL=$(scripts/postgres.sh))"
        );
        return serde_json::Value::Null;
    }
    let database = runtime.block_on(flynn_testkit::postgres::TestDatabase::create());
    let memory = Memory::postgres(
        database.url(),
        "the bench database".to_owned(),
        Some(Arc::new(Projection)),
    )
    .unwrap();
    let files = runtime
        .block_on(flynn_memory::MemoryStore::new(root).list())
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let source = flynn_memory::MemoryStore::new(root);
        for file in &files {
            let content = source.read(&file.namespace).await.unwrap().unwrap().content;
            memory
                .write(
                    &file.namespace,
                    &content,
                    flynn_memory::WriteMode::Replace { expected: None },
                )
                .await
                .unwrap();
        }
        // Tables as the server's autovacuum would leave them after a while.
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(database.url())
            .await
            .unwrap();
        sqlx::query("VACUUM ANALYZE")
            .execute(&mut conn)
            .await
            .unwrap();
    });
    let build = started.elapsed();
    let status = runtime.block_on(memory.status()).unwrap();
    assert_eq!(status.vectors, FILES * NOTES_PER_FILE, "{status:?}");
    search_each_way(c, "memory_postgres", runtime, &memory, queries);
    runtime.block_on(memory.close());
    json!({
        "build_ms": build.as_millis() as u64,
        "chunks_per_second": (status.chunks as f64 / build.as_secs_f64()) as u64,
        "bytes": status.bytes,
    })
}

/// Hybrid, keyword-only and vector-only search of `memory` as indexed,
/// over `queries` in turn, as criterion group `name`.
fn search_each_way(
    c: &mut Criterion,
    name: &str,
    runtime: &tokio::runtime::Runtime,
    memory: &Memory,
    queries: &[String],
) {
    let mut group = c.benchmark_group(name);
    group.sample_size(30);
    for (name, mode) in [
        ("hybrid_search_100k", SearchMode::Hybrid),
        ("keyword_search_100k", SearchMode::Keyword),
        ("vector_search_100k", SearchMode::Vector),
    ] {
        let options = SearchOptions {
            limit: 8,
            mode,
            ..SearchOptions::default()
        };
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                let hits = runtime
                    .block_on(memory.search_indexed(&queries[i % queries.len()], &options))
                    .unwrap();
                std::hint::black_box(hits);
            });
        });
    }
    group.finish();
}

criterion_group!(group, benches);
criterion_main!(group);
