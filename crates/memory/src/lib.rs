//! Flynn's memory: namespaced markdown files that are the source of truth
//! (`global.md`, `user.md`, `sessions/<id>.md`, `daily/<date>.md`...), a
//! search index in SQLite rebuilt from them (FTS5 keyword ranking plus
//! sqlite-vec similarity, merged by reciprocal rank fusion), and the
//! embedders that feed it.

pub mod embed;
mod http;

pub use embed::{EmbedError, EmbedInput, Embedder, HttpSettings};
