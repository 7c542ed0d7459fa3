//! Rankings on a small labelled set: for each query, the one chunk that
//! answers it. Keyword-only (BM25) and hybrid search are scored by mean
//! reciprocal rank; the hybrid must do at least as well. With the local
//! embedder (feature `local-embeddings`) the set also has paraphrased
//! queries that share no word with their answer, where the hybrid must
//! do strictly better.

use std::path::Path;
use std::sync::Arc;

use flynn_memory::{Embedder, Memory, SearchMode, SearchOptions};

use crate::support::TestEmbedder;

/// (file, content): one fact per paragraph, so one chunk each.
pub const CORPUS: &[(&str, &str)] = &[
    (
        "user.md",
        "# Health\nAllergic to peanuts and shellfish.\n\n# Pets\nHas a golden retriever called Rex.\n\n# Commute\nCycles to work along the river most days.",
    ),
    (
        "global.md",
        "The home server is called atlas and runs Debian.\n\nThe wifi password is kept in the kitchen drawer.",
    ),
    (
        "projects/boat.md",
        "The boat engine was serviced in April by Marco.\n\nThe mooring fee is paid every January.",
    ),
    (
        "projects/garden.md",
        "Tomatoes are planted on the south balcony.\n\nThe apple tree needs pruning in February.",
    ),
    (
        "daily/2026-11-20.md",
        "Booked flights to Lisbon for the conference in March.\n\nDentist appointment moved to Thursday.",
    ),
];

/// (query, file of the answer, a phrase of the answer).
pub const KEYWORD_QUERIES: &[(&str, &str, &str)] = &[
    ("peanut allergy", "user.md", "peanuts"),
    ("what is the dog's name", "user.md", "retriever"),
    ("cycling route", "user.md", "Cycles"),
    ("name of the server", "global.md", "atlas"),
    ("wifi password", "global.md", "wifi"),
    ("when was the engine serviced", "projects/boat.md", "engine"),
    ("mooring fee", "projects/boat.md", "mooring"),
    ("planting tomatoes", "projects/garden.md", "Tomatoes"),
    ("prune the apple tree", "projects/garden.md", "apple"),
    ("flights to Lisbon", "daily/2026-11-20.md", "Lisbon"),
    ("dentist", "daily/2026-11-20.md", "Dentist"),
];

pub async fn memory_with_corpus(dir: &Path, embedder: Option<Arc<dyn Embedder>>) -> Memory {
    let root = dir.join("memory");
    for (file, content) in CORPUS {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let memory = Memory::open(&root, &dir.join("index.db"), embedder)
        .await
        .unwrap();
    let report = memory.sync().await.unwrap();
    assert_eq!(report.embed_error, None);
    memory
}

/// Mean reciprocal rank of the answers (0 when not in the top 5).
pub async fn mean_reciprocal_rank(
    memory: &Memory,
    queries: &[(&str, &str, &str)],
    mode: SearchMode,
) -> f64 {
    let options = SearchOptions {
        limit: 5,
        mode,
        min_similarity: 0.0,
        ..SearchOptions::default()
    };
    let mut total = 0.0;
    for (query, file, phrase) in queries {
        let hits = memory.search(query, &options).await.unwrap();
        let rank = hits
            .iter()
            .position(|h| h.file == *file && h.text.contains(phrase))
            .map_or(0.0, |i| 1.0 / (i + 1) as f64);
        total += rank;
    }
    total / queries.len() as f64
}

#[tokio::test]
async fn hybrid_ranks_at_least_as_well_as_keywords() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Arc::new(TestEmbedder::new("test/words", 128));
    let memory = memory_with_corpus(dir.path(), Some(embedder)).await;
    let keyword = mean_reciprocal_rank(&memory, KEYWORD_QUERIES, SearchMode::Keyword).await;
    let hybrid = mean_reciprocal_rank(&memory, KEYWORD_QUERIES, SearchMode::Hybrid).await;
    // Porter stemming finds "peanut"/"peanuts", "cycling"/"cycles"...
    assert!(keyword >= 0.8, "BM25 MRR {keyword:.3}");
    assert!(
        hybrid >= keyword,
        "hybrid MRR {hybrid:.3} < BM25 MRR {keyword:.3}"
    );
}
