//! Walking the workspace as people expect: `.gitignore`, `.ignore` and
//! hidden files skipped, an optional glob, a stop switch for timeouts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use globset::{Glob, GlobMatcher};

use crate::ToolError;

/// A glob for file names (`*.rs`) or paths relative to the walk's root
/// (`src/**/*.rs`).
pub(super) struct NameGlob {
    matcher: GlobMatcher,
    by_path: bool,
}

impl NameGlob {
    pub(super) fn new(pattern: &str) -> Result<Self, ToolError> {
        let glob = Glob::new(pattern)
            .map_err(|e| ToolError::failed(format!("invalid glob '{pattern}': {e}")))?;
        Ok(NameGlob {
            matcher: glob.compile_matcher(),
            by_path: pattern.contains('/'),
        })
    }

    /// Whether `path` (relative to the root) matches: by its whole path
    /// when the glob has a `/`, else by its file name.
    pub(super) fn matches(&self, relative: &Path) -> bool {
        if self.by_path {
            self.matcher.is_match(relative)
        } else {
            relative
                .file_name()
                .is_some_and(|name| self.matcher.is_match(Path::new(name)))
        }
    }
}

/// Set when the call is dropped (timeout, cancel), so a blocking walk stops.
#[derive(Clone, Default)]
pub(super) struct Stop(Arc<AtomicBool>);

impl Stop {
    pub(super) fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sets its [`Stop`] when dropped.
pub(super) struct StopOnDrop(pub(super) Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.0.store(true, Ordering::Relaxed);
    }
}

/// One entry found by a walk.
pub(super) struct Entry {
    pub(super) path: PathBuf,
    pub(super) relative: PathBuf,
    pub(super) is_dir: bool,
}

/// Visits the entries under `root` (not `root` itself), sorted by path,
/// skipping ignored and hidden ones and everything under `private`
/// (canonical paths: FLYNN_HOME), until `visit` returns false or `stop`
/// is set.
pub(super) fn walk(
    root: &Path,
    private: Vec<PathBuf>,
    stop: &Stop,
    mut visit: impl FnMut(Entry) -> bool,
) {
    let walker = ignore::WalkBuilder::new(root)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_path(|a, b| a.cmp(b))
        .filter_entry(move |entry| !private.iter().any(|dir| entry.path().starts_with(dir)))
        .build();
    for entry in walker {
        if stop.is_set() {
            return;
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path().to_path_buf();
        let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if !visit(Entry {
            path,
            relative,
            is_dir,
        }) {
            return;
        }
    }
}
