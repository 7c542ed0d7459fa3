//! The local all-MiniLM-L6-v2 embedder (feature `local-embeddings`),
//! checked against sentence-transformers' published numbers, and what it
//! adds to search: paraphrases found that share no word with the answer.
#![cfg(feature = "local-embeddings")]

use std::path::PathBuf;
use std::sync::Arc;

use flynn_memory::embed::LocalEmbedder;
use flynn_memory::vector::cosine;
use flynn_memory::{EmbedInput, Embedder, SearchMode};

use crate::ranking::{KEYWORD_QUERIES, mean_reciprocal_rank, memory_with_corpus};

fn model_dir() -> PathBuf {
    match std::env::var_os("FLYNN_MINILM_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "FLYNN_MINILM_DIR is not set: run `export FLYNN_MINILM_DIR=$(scripts/fetch-minilm.sh)` (.ci/run does)"
        ),
    }
}

fn embedder() -> LocalEmbedder {
    LocalEmbedder::load(&model_dir(), 8).unwrap()
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

/// The sentence-transformers quick start (sbert.net, "Usage") prints this
/// similarity matrix for all-MiniLM-L6-v2:
/// `tensor([[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], ...])`.
#[tokio::test]
async fn similarities_match_the_published_ones() {
    let embedder = embedder();
    let sentences = strings(&[
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
    ]);
    let vectors = embedder
        .embed(&sentences, EmbedInput::Document)
        .await
        .unwrap();
    assert_eq!(vectors.len(), 3);
    for vector in &vectors {
        assert_eq!(vector.len(), 384);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    for (a, b, published) in [(0, 1, 0.6660), (0, 2, 0.1046), (1, 2, 0.1411)] {
        let got = cosine(&vectors[a], &vectors[b]);
        assert!(
            (got - published).abs() < 0.005,
            "cos({a},{b}) = {got:.4}, published {published}"
        );
    }
    assert_eq!(embedder.id(), "local/all-MiniLM-L6-v2");
}

#[tokio::test]
async fn a_sentence_gets_the_same_vector_alone_or_padded_in_a_batch() {
    let embedder = embedder();
    let alone = embedder
        .embed(&strings(&["Flynn keeps notes."]), EmbedInput::Query)
        .await
        .unwrap();
    let long = "A much longer sentence that needs many more tokens than the short one does, so the short one is padded. ".repeat(4);
    let batch = embedder
        .embed(
            &[long, "Flynn keeps notes.".to_owned()],
            EmbedInput::Document,
        )
        .await
        .unwrap();
    let similarity = cosine(&alone[0], &batch[1]);
    assert!(similarity > 0.9999, "{similarity}");
    let again = embedder
        .embed(&strings(&["Flynn keeps notes."]), EmbedInput::Query)
        .await
        .unwrap();
    assert_eq!(alone, again, "deterministic");
}

#[test]
fn a_directory_without_the_model_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = LocalEmbedder::load(dir.path(), 8).unwrap_err().to_string();
    assert!(
        error.contains("config.json is missing") && error.contains("scripts/fetch-minilm.sh"),
        "{error}"
    );
}

/// Queries that share no word with their answer.
const PARAPHRASES: &[(&str, &str, &str)] = &[
    ("what animal lives with me", "user.md", "retriever"),
    ("which foods can make me ill", "user.md", "peanuts"),
    ("how do I get to the office", "user.md", "Cycles"),
    (
        "when is my trip to Portugal",
        "daily/2026-11-20.md",
        "Lisbon",
    ),
    ("who fixed the motor", "projects/boat.md", "engine"),
];

#[tokio::test]
async fn hybrid_search_finds_paraphrases_that_keywords_miss() {
    let dir = tempfile::tempdir().unwrap();
    let memory = memory_with_corpus(dir.path(), Some(Arc::new(embedder()))).await;
    let keyword = mean_reciprocal_rank(&memory, PARAPHRASES, SearchMode::Keyword).await;
    let hybrid = mean_reciprocal_rank(&memory, PARAPHRASES, SearchMode::Hybrid).await;
    assert!(
        hybrid > keyword + 0.3,
        "hybrid MRR {hybrid:.3} vs BM25 {keyword:.3}"
    );
    let keyword_all = mean_reciprocal_rank(&memory, KEYWORD_QUERIES, SearchMode::Keyword).await;
    let hybrid_all = mean_reciprocal_rank(&memory, KEYWORD_QUERIES, SearchMode::Hybrid).await;
    assert!(
        hybrid_all >= keyword_all,
        "hybrid MRR {hybrid_all:.3} vs BM25 {keyword_all:.3}"
    );
}
