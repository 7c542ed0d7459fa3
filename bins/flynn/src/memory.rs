//! `flynn memory`: status, search, reindex and show, on the memory the
//! config points at (no model is needed).

use flynn_core::config;

use crate::env::CliEnv;
use flynn_core::Memory;
use flynn_core::memory::{
    Hit, IndexStatus, Namespace, Scope, SearchMode, SearchOptions, SyncReport,
};
use serde_json::json;

use crate::cli::{MemoryArgs, MemoryCommand};
use crate::exit::Failure;

fn failure(error: impl Into<flynn_core::Error>) -> Failure {
    let error = error.into();
    Failure::from_code(error.code(), error.to_string())
}

pub async fn run(args: MemoryArgs) -> Result<(), Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let memory = flynn_core::open_memory(&loaded.config, Some(&loaded.paths.home))
        .await
        .map_err(failure)?
        .ok_or_else(|| Failure::usage("memory is off in the config (memory.enabled: false)"))?;
    let result = match args.command {
        MemoryCommand::Status { json } => status(&memory, json).await,
        MemoryCommand::Search {
            query,
            limit,
            keywords,
            json,
        } => search(&memory, &query, limit, keywords, json).await,
        MemoryCommand::Reindex { json } => {
            let report = memory.reindex().await.map_err(failure)?;
            let status = memory
                .index()
                .await
                .map_err(failure)?
                .status()
                .await
                .map_err(failure)?;
            print_report(&report, &status, json);
            Ok(())
        }
        MemoryCommand::Show { namespace, session } => show(&memory, &namespace, session).await,
    };
    memory.close().await;
    result
}

async fn status(memory: &Memory, json: bool) -> Result<(), Failure> {
    let report = memory.sync().await.map_err(failure)?;
    let status = memory
        .index()
        .await
        .map_err(failure)?
        .status()
        .await
        .map_err(failure)?;
    let mode = search_mode(&status);
    if json {
        outln!(
            "{}",
            json!({
                "dir": memory.store().dir(),
                "index": status.path,
                "index_bytes": status.bytes,
                "files": status.files,
                "chunks": status.chunks,
                "vectors": status.vectors,
                "embedder": status.embedder,
                "dimensions": status.dimensions,
                "search": if status.embedder.is_some() { "hybrid" } else { "keywords" },
                "embedder_error": report.embed_error.or(status.last_error),
            })
        );
        return Ok(());
    }
    outln!("memory   {}", memory.store().dir().display());
    outln!(
        "index    {} ({}): {}, {}",
        status.path.display(),
        human_bytes(status.bytes),
        count(status.files, "file"),
        count(status.chunks, "chunk")
    );
    outln!("search   {mode}");
    if let Some(error) = report.embed_error.or(status.last_error) {
        outln!(
            "warning  the embedder failed, so search uses keywords where vectors are missing: {error}"
        );
    }
    Ok(())
}

fn search_mode(status: &IndexStatus) -> String {
    match &status.embedder {
        None => "keywords only (BM25): no embedder is configured (memory.embeddings)".to_owned(),
        Some(embedder) => format!(
            "hybrid: keywords (BM25) and vectors from {embedder}{}, {} of {} chunks embedded",
            status
                .dimensions
                .map(|d| format!(" ({d} dimensions)"))
                .unwrap_or_default(),
            status.vectors,
            status.chunks
        ),
    }
}

async fn search(
    memory: &Memory,
    query: &str,
    limit: usize,
    keywords: bool,
    json: bool,
) -> Result<(), Failure> {
    if query.trim().is_empty() {
        return Err(Failure::usage(
            "the search query is empty; say what to look for",
        ));
    }
    let options = SearchOptions {
        limit: limit.clamp(1, 100),
        mode: if keywords {
            SearchMode::Keyword
        } else {
            SearchMode::Hybrid
        },
        ..SearchOptions::default()
    };
    let hits = memory.search(query, &options).await.map_err(failure)?;
    if json {
        let out: Vec<_> = hits.iter().map(hit_json).collect();
        outln!("{}", serde_json::Value::Array(out));
        return Ok(());
    }
    outln!("{}", flynn_core::render_memory_hits(query, &hits));
    Ok(())
}

fn hit_json(hit: &Hit) -> serde_json::Value {
    json!({
        "namespace": hit.namespace.as_str(),
        "file": hit.file,
        "start_line": hit.start_line,
        "end_line": hit.end_line,
        "heading": hit.heading,
        "snippet": hit.snippet,
        "score": hit.score,
        "keyword_rank": hit.keyword_rank,
        "vector_rank": hit.vector_rank,
        "similarity": hit.similarity,
    })
}

fn print_report(report: &SyncReport, status: &IndexStatus, json: bool) {
    if json {
        outln!(
            "{}",
            json!({
                "files": status.files,
                "chunks": status.chunks,
                "vectors": status.vectors,
                "embedded": report.embedded,
                "from_cache": report.reused,
                "pending": report.pending,
                "embedder_error": report.embed_error,
            })
        );
        return;
    }
    let mut line = format!(
        "indexed {}: {}",
        count(status.files, "file"),
        count(status.chunks, "chunk")
    );
    if status.embedder.is_some() {
        line.push_str(&format!(
            ", {} vectors ({} embedded, {} from the cache)",
            status.vectors, report.embedded, report.reused
        ));
    } else {
        line.push_str(" (keywords only: no embedder is configured)");
    }
    outln!("{line}");
    if let Some(error) = &report.embed_error {
        outln!(
            "warning  {} chunks have no vector yet; the embedder failed: {error}",
            report.pending
        );
    }
}

async fn show(memory: &Memory, name: &str, session: Option<String>) -> Result<(), Failure> {
    let session = match session {
        Some(key) => Some(
            crate::sessions::session_arg(&key)
                .map_err(|e| Failure::usage(format!("--session: {e}")))?,
        ),
        None => None,
    };
    let namespace = Namespace::resolve(name, &Scope::now(session))
        .map_err(|e| Failure::usage(e.to_string()))?;
    match memory.store().read(&namespace).await.map_err(failure)? {
        Some(file) => {
            out!("{}", file.content);
            Ok(())
        }
        None => {
            let files: Vec<String> = memory
                .store()
                .list()
                .await
                .map_err(failure)?
                .into_iter()
                .map(|f| f.namespace.to_string())
                .collect();
            Err(Failure::other(format!(
                "no memory file {namespace}.md in {} (files: {})",
                memory.store().dir().display(),
                if files.is_empty() {
                    "none yet".to_owned()
                } else {
                    files.join(", ")
                }
            )))
        }
    }
}

/// `1 file`, `3 files`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_048_576.0),
    }
}
