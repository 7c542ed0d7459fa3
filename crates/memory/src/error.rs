use std::path::PathBuf;

use crate::embed::EmbedError;

/// What went wrong with memory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A namespace that names no memory file.
    #[error("memory namespace '{name}': {problem}")]
    Namespace { name: String, problem: String },
    /// A replace with no version, or with a version the file no longer
    /// has: someone changed it since it was read.
    #[error(
        "memory '{namespace}' changed since it was read (it is now version {current}); read it again and write your change on top of what it says now"
    )]
    Conflict { namespace: String, current: String },
    /// A replace of a file that has content, without saying which version
    /// was read.
    #[error(
        "memory '{namespace}' already has content (version {current}); read it first and pass that version to replace it, or append instead"
    )]
    VersionRequired { namespace: String, current: String },
    /// Too much text in one write or one file.
    #[error("memory '{namespace}': {size} bytes is more than the {limit} a memory file may hold")]
    TooLarge {
        namespace: String,
        size: usize,
        limit: usize,
    },
    #[error("memory file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The search index's database.
    #[error("memory index {path}: {source}")]
    Index {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    /// Memory kept in PostgreSQL: its database.
    #[error("memory in {location}: {source}")]
    Database {
        location: String,
        #[source]
        source: sqlx::Error,
    },
    /// Memory tables written by a newer Flynn.
    #[error(
        "memory in {location} was written by a newer Flynn (tables of version {found}; this one knows {known}): upgrade Flynn"
    )]
    Schema {
        location: String,
        found: i64,
        known: i64,
    },
    /// Text memory cannot hold.
    #[error("memory '{namespace}': {problem}")]
    Content { namespace: String, problem: String },
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
