//! What the two indexes (SQLite beside the files, and PostgreSQL) share:
//! the embedder's health, the query's vector, reciprocal rank fusion of
//! the keyword and vector rankings, and the hits made from chunk rows.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::embed::{EmbedInput, Embedder};
use crate::index::{Hit, RRF_K};
use crate::namespace::Namespace;
use crate::vector::{cosine_from_distance, normalise};

/// How long query embedding may take before a search goes on with
/// keywords only.
const QUERY_EMBED_TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause after the embedder fails; it doubles up to
/// [`MAX_BACKOFF`] and resets on success.
const FIRST_BACKOFF: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
struct HealthState {
    last_error: Option<String>,
    retry_at: Option<Instant>,
    backoff: Option<Duration>,
}

/// Whether the embedder answers, and when to try it again after it
/// failed.
#[derive(Debug, Default)]
pub(crate) struct Health(Mutex<HealthState>);

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The embedder answered: forget past failures.
    pub(crate) fn ok(&self) {
        *self.state() = HealthState::default();
    }

    /// Records a failure and when to try again; returns the message.
    pub(crate) fn failed(&self, message: String) -> String {
        tracing::warn!(error = %message, "memory embedder failed; search uses keywords until it answers");
        let mut state = self.state();
        let backoff = state
            .backoff
            .map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
        state.backoff = Some(backoff);
        state.retry_at = Some(Instant::now() + backoff);
        state.last_error = Some(message.clone());
        message
    }

    /// Whether the embedder failed recently and is left alone for now.
    pub(crate) fn waiting(&self) -> bool {
        self.state().retry_at.is_some_and(|at| Instant::now() < at)
    }

    /// The last failure, when the embedder has not answered since.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.state().last_error.clone()
    }
}

/// Embeds `texts` as documents, `batch` at a time, each vector made a
/// unit vector: one result per text, in order; `None` for the texts not
/// embedded because the embedder failed (the failure is recorded in
/// `health` and returned as the message, and no later batch is tried).
pub(crate) async fn embed_documents(
    embedder: &dyn Embedder,
    health: &Health,
    texts: &[String],
    batch: usize,
) -> (Vec<Option<Vec<f32>>>, Option<String>) {
    let mut vectors: Vec<Option<Vec<f32>>> = Vec::with_capacity(texts.len());
    let mut failure = None;
    for group in texts.chunks(batch.max(1)) {
        if failure.is_some() {
            vectors.extend(group.iter().map(|_| None));
            continue;
        }
        match embedder.embed(group, EmbedInput::Document).await {
            Ok(result) if result.len() == group.len() => {
                health.ok();
                vectors.extend(result.into_iter().map(|mut vector| {
                    normalise(&mut vector);
                    Some(vector)
                }));
            }
            Ok(result) => {
                let message = format!("{} vectors for {} texts", result.len(), group.len());
                failure = Some(health.failed(message));
                vectors.extend(group.iter().map(|_| None));
            }
            Err(error) => {
                failure = Some(health.failed(error.to_string()));
                vectors.extend(group.iter().map(|_| None));
            }
        }
    }
    (vectors, failure)
}

/// The query's vector, or `None` (no embedder, no vectors of
/// `dimensions` yet, the embedder failing or too slow): the search goes
/// on with keywords.
pub(crate) async fn query_vector(
    embedder: Option<&Arc<dyn Embedder>>,
    dimensions: Option<String>,
    health: &Health,
    query: &str,
) -> Option<Vec<f32>> {
    let embedder = embedder?;
    let dimensions = dimensions?;
    if health.waiting() {
        return None;
    }
    let texts = [query.to_owned()];
    let result = tokio::time::timeout(
        QUERY_EMBED_TIMEOUT,
        embedder.embed(&texts, EmbedInput::Query),
    )
    .await;
    let mut vector = match result {
        Ok(Ok(mut vectors)) if vectors.len() == 1 => vectors.pop()?,
        Ok(Ok(vectors)) => {
            health.failed(format!("{} vectors for 1 query", vectors.len()));
            return None;
        }
        Ok(Err(error)) => {
            health.failed(error.to_string());
            return None;
        }
        Err(_) => {
            tracing::warn!("memory query embedding timed out; keywords only");
            return None;
        }
    };
    if vector.len().to_string() != dimensions {
        tracing::warn!(got = vector.len(), %dimensions, "query vector size differs from the index; keywords only");
        return None;
    }
    normalise(&mut vector);
    Some(vector)
}

/// A chunk's fused score, keyword rank, vector rank and similarity.
pub(crate) type Fused = (f64, Option<u32>, Option<u32>, Option<f64>);

/// Reciprocal rank fusion of the keyword ranking (chunk ids, best first)
/// and the vector ranking (chunk ids with their L2 distance to the query,
/// nearest first): the chunks with a score, best first. A chunk found by
/// vectors alone counts only when at least `min_similarity` similar.
pub(crate) fn fuse(
    keyword: &[i64],
    nearest: &[(i64, f64)],
    min_similarity: f64,
) -> Vec<(i64, Fused)> {
    let mut fused: HashMap<i64, Fused> = HashMap::new();
    for (rank, id) in keyword.iter().enumerate() {
        let rank = u32::try_from(rank + 1).unwrap_or(u32::MAX);
        let entry = fused.entry(*id).or_default();
        entry.0 += 1.0 / (RRF_K + f64::from(rank));
        entry.1 = Some(rank);
    }
    for (rank, (id, distance)) in nearest.iter().enumerate() {
        let similarity = cosine_from_distance(*distance);
        let rank = u32::try_from(rank + 1).unwrap_or(u32::MAX);
        let entry = fused.entry(*id).or_default();
        entry.3 = Some(similarity);
        if entry.1.is_none() && similarity < min_similarity {
            continue;
        }
        entry.0 += 1.0 / (RRF_K + f64::from(rank));
        entry.2 = Some(rank);
    }
    let mut ranked: Vec<(i64, Fused)> = fused
        .into_iter()
        .filter(|(_, (score, ..))| *score > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then(a.0.cmp(&b.0)));
    ranked
}

/// A chunk as an index stores it.
pub(crate) struct ChunkRow {
    /// The file, relative to the memory directory.
    pub(crate) file: String,
    pub(crate) start_line: i64,
    pub(crate) end_line: i64,
    pub(crate) heading: Option<String>,
    pub(crate) text: String,
}

/// The hit a ranked chunk makes; `None` for a file that is not memory.
pub(crate) fn hit(row: ChunkRow, fused: Fused, words: &[String]) -> Option<Hit> {
    let namespace = Namespace::from_relative(Path::new(&row.file))?;
    let (score, keyword_rank, vector_rank, similarity) = fused;
    Some(Hit {
        namespace,
        snippet: snippet(&row.text, words),
        start_line: row.start_line.try_into().unwrap_or(0),
        end_line: row.end_line.try_into().unwrap_or(0),
        heading: row.heading,
        file: row.file,
        text: row.text,
        score,
        keyword_rank,
        vector_rank,
        similarity,
    })
}

/// Up to ~200 characters of `text` on one line, around the first query
/// word it contains.
fn snippet(text: &str, words: &[String]) -> String {
    const WIDTH: usize = 200;
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= WIDTH {
        return flat;
    }
    let lower = flat.to_lowercase();
    let at = words
        .iter()
        .filter_map(|w| lower.find(w.as_str()))
        .min()
        .unwrap_or(0);
    // Lower-casing can change byte offsets; fall back to the start.
    let at = if flat.is_char_boundary(at) { at } else { 0 };
    let chars_before = flat[..at].chars().count();
    let start_char = chars_before.saturating_sub(WIDTH / 4);
    let piece: String = flat.chars().skip(start_char).take(WIDTH).collect();
    let mut out = String::new();
    if start_char > 0 {
        out.push('…');
    }
    out.push_str(piece.trim());
    if start_char + WIDTH < flat.chars().count() {
        out.push('…');
    }
    out
}
