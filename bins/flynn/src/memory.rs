//! `flynn memory`: status, search, reindex, show, edit, export and
//! import, on the memory the config points at (files, or rows of the
//! PostgreSQL session store; no model is needed).

use flynn_core::config;

use crate::env::CliEnv;
use flynn_core::Memory;
use flynn_core::memory::Location;
use std::path::Path;

use flynn_core::memory::{
    Hit, IndexStatus, MemoryStore, Namespace, Scope, SearchMode, SearchOptions, SyncReport,
    WriteMode,
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
    if let Some(dir) =
        flynn_core::unused_memory_files(&loaded.config, Some(&loaded.paths.home), &memory).await
        && !matches!(args.command, MemoryCommand::Import { .. })
    {
        eprintln!(
            "note: the memory files in {} are not used: with the sessions in PostgreSQL, memory is kept there too; move them in with `flynn memory import {}`",
            dir.display(),
            dir.display()
        );
    }
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
            let status = memory.status().await.map_err(failure)?;
            print_report(&report, &status, json);
            Ok(())
        }
        MemoryCommand::Show { namespace, session } => show(&memory, &namespace, session).await,
        MemoryCommand::Edit { namespace, session } => edit(&memory, &namespace, session).await,
        MemoryCommand::Export { dir, force } => export(&memory, &dir, force).await,
        MemoryCommand::Import { dir, replace } => import(&memory, &dir, replace).await,
    };
    memory.close().await;
    result
}

async fn status(memory: &Memory, json: bool) -> Result<(), Failure> {
    let report = memory.sync().await.map_err(failure)?;
    let status = memory.status().await.map_err(failure)?;
    let in_database = matches!(memory.location(), Location::Database { .. });
    let mode = search_mode(
        &status,
        if in_database {
            "PostgreSQL full-text search"
        } else {
            "BM25"
        },
    );
    if json {
        outln!(
            "{}",
            json!({
                "dir": match memory.location() {
                    Location::Files { dir, .. } => Some(dir),
                    Location::Database { .. } => None,
                },
                "database": match memory.location() {
                    Location::Files { .. } => None,
                    Location::Database { url } => Some(url),
                },
                "index": status.location,
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
    match memory.location() {
        Location::Files { dir, .. } => outln!("memory   {}", dir.display()),
        Location::Database { url } => outln!("memory   in the session database, {url}"),
    }
    outln!(
        "index    {} ({}): {}, {}",
        if in_database {
            "its memory_* tables"
        } else {
            status.location.as_str()
        },
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

/// How search ranks; `ranking` names the keyword ranking (BM25 in the
/// SQLite index, PostgreSQL's full-text search in the database).
fn search_mode(status: &IndexStatus, ranking: &str) -> String {
    match &status.embedder {
        None => {
            format!("keywords only ({ranking}): no embedder is configured (memory.embeddings)")
        }
        Some(embedder) => format!(
            "hybrid: keywords ({ranking}) and vectors from {embedder}{}, {} of {} chunks embedded",
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

/// The namespace a command line names, `session` standing for
/// `--session`'s conversation.
fn namespace_arg(name: &str, session: Option<String>) -> Result<Namespace, Failure> {
    let session = match session {
        Some(key) => Some(
            crate::sessions::session_arg(&key)
                .map_err(|e| Failure::usage(format!("--session: {e}")))?,
        ),
        None => None,
    };
    Namespace::resolve(name, &Scope::now(session)).map_err(|e| Failure::usage(e.to_string()))
}

async fn show(memory: &Memory, name: &str, session: Option<String>) -> Result<(), Failure> {
    let namespace = namespace_arg(name, session)?;
    match memory.read(&namespace).await.map_err(failure)? {
        Some(file) => {
            out!("{}", file.content);
            Ok(())
        }
        None => {
            let files: Vec<String> = memory
                .list()
                .await
                .map_err(failure)?
                .into_iter()
                .map(|f| f.namespace.to_string())
                .collect();
            Err(Failure::other(format!(
                "no memory file {namespace}.md in {} (files: {})",
                memory.location(),
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

/// Opens the file in the user's editor on a private copy, then saves the
/// copy if it changed and the file did not change meanwhile.
async fn edit(memory: &Memory, name: &str, session: Option<String>) -> Result<(), Failure> {
    let namespace = namespace_arg(name, session)?;
    let current = memory.read(&namespace).await.map_err(failure)?;
    let original = current
        .as_ref()
        .map(|file| file.content.clone())
        .unwrap_or_default();
    // A directory only its owner may enter (memory is personal), removed
    // afterwards unless it keeps an edit that could not be saved.
    let scratch = tempfile::Builder::new()
        .prefix("flynn-memory-")
        .tempdir()
        .map_err(|e| Failure::other(format!("cannot make a place to edit in: {e}")))?;
    let copy = scratch
        .path()
        .join(format!("{}.md", namespace.as_str().replace('/', "-")));
    std::fs::write(&copy, &original)
        .map_err(|e| Failure::other(format!("cannot write {}: {e}", copy.display())))?;
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    // Through the shell, as git does: the variable may hold arguments
    // (`code --wait`).
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg("editor")
        .arg(&copy)
        .status()
        .await
        .map_err(|e| Failure::other(format!("cannot start the editor ({editor}): {e}")))?;
    if !status.success() {
        return Err(Failure::other(format!(
            "the editor ({editor}) {status}; nothing saved"
        )));
    }
    let edited = std::fs::read(&copy)
        .map_err(|e| Failure::other(format!("cannot read {}: {e}", copy.display())))?;
    let Ok(edited) = String::from_utf8(edited) else {
        let kept = scratch.keep();
        return Err(Failure::other(format!(
            "the edited text is not UTF-8; nothing saved (it is in {})",
            kept.join(copy.file_name().unwrap_or_default()).display()
        )));
    };
    if edited == original {
        outln!("{namespace}: unchanged");
        return Ok(());
    }
    let mode = WriteMode::Replace {
        expected: current.map(|file| file.version),
    };
    match memory.write(&namespace, &edited, mode).await {
        Ok(written) => {
            outln!(
                "{namespace}: saved ({} bytes, version {})",
                written.bytes,
                written.version
            );
            Ok(())
        }
        Err(error) => {
            let kept = scratch.keep();
            let copy = kept.join(copy.file_name().unwrap_or_default());
            Err(Failure::other(format!(
                "{error}; nothing saved: your text is in {}",
                copy.display()
            )))
        }
    }
}

/// Writes every memory file under `dir`, laid out as the memory directory.
async fn export(memory: &Memory, dir: &Path, force: bool) -> Result<(), Failure> {
    let occupied = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(error) => {
            return Err(Failure::other(format!("{}: {error}", dir.display())));
        }
    };
    if occupied && !force {
        return Err(Failure::usage(format!(
            "{} is not empty: export into a new or empty directory, or pass --force to overwrite files of the same names",
            dir.display()
        )));
    }
    let target = MemoryStore::new(dir);
    let mut exported = 0;
    let mut bytes = 0;
    for entry in memory.list().await.map_err(failure)? {
        let Some(file) = memory.read(&entry.namespace).await.map_err(failure)? else {
            continue;
        };
        let existing = target.read(&entry.namespace).await.map_err(failure)?;
        let written = target
            .write(
                &entry.namespace,
                &file.content,
                WriteMode::Replace {
                    expected: existing.map(|f| f.version),
                },
            )
            .await
            .map_err(failure)?;
        exported += 1;
        bytes += written.bytes;
    }
    outln!(
        "exported {} ({}) to {}",
        count(exported, "file"),
        human_bytes(u64::try_from(bytes).unwrap_or(u64::MAX)),
        dir.display()
    );
    Ok(())
}

/// Reads every memory file under `dir` into memory: new ones are added,
/// identical ones left alone, different ones refused unless `replace`.
async fn import(memory: &Memory, dir: &Path, replace: bool) -> Result<(), Failure> {
    if !dir.is_dir() {
        return Err(Failure::usage(format!(
            "{} is not a directory of memory files",
            dir.display()
        )));
    }
    let source = MemoryStore::new(dir);
    let mut plan = Vec::new();
    let mut differing = Vec::new();
    for entry in source.list().await.map_err(failure)? {
        let Some(file) = source.read(&entry.namespace).await.map_err(failure)? else {
            continue;
        };
        let mut content = file.content;
        if !content.is_empty() && !content.ends_with('\n') {
            content.push('\n');
        }
        let current = memory.read(&entry.namespace).await.map_err(failure)?;
        match &current {
            Some(existing) if existing.content == content => continue,
            Some(_) => differing.push(entry.relative.clone()),
            None => {}
        }
        plan.push((entry.namespace, content, current.map(|f| f.version)));
    }
    if !differing.is_empty() && !replace {
        return Err(Failure::other(format!(
            "memory already has other content in {}; nothing imported. Pass --replace to overwrite them (`flynn memory export` keeps a copy first)",
            differing.join(", ")
        )));
    }
    let (mut added, mut replaced) = (0, 0);
    for (namespace, content, expected) in plan {
        let existed = expected.is_some();
        memory
            .write(&namespace, &content, WriteMode::Replace { expected })
            .await
            .map_err(failure)?;
        if existed {
            replaced += 1;
        } else {
            added += 1;
        }
    }
    outln!(
        "imported {} into {}: {added} added, {replaced} replaced",
        dir.display(),
        memory.location()
    );
    Ok(())
}
