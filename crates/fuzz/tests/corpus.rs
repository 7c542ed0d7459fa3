//! Replays every committed fuzz input (`fuzz/corpus/<target>/*`) through
//! its target on stable: what fuzzing found stays fixed, and a target
//! without a corpus fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Runs each input of `dir` through `target`: how many there were, and
/// the ones that panicked.
fn replay(name: &str, target: flynn_fuzz::Target, dir: &Path) -> (usize, Vec<String>) {
    let files = inputs(dir);
    let mut failed = Vec::new();
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if std::panic::catch_unwind(|| target(&data)).is_err() {
            failed.push(format!("{name}: {}", file.display()));
        }
    }
    (files.len(), failed)
}

#[test]
fn every_target_has_a_corpus_and_replays_it_without_a_failure() {
    let mut empty = Vec::new();
    let mut failed = Vec::new();
    for (name, target) in flynn_fuzz::TARGETS {
        let (count, failures) = replay(name, *target, &fuzz_dir().join("corpus").join(name));
        if count == 0 {
            empty.push(*name);
        }
        failed.extend(failures);
    }
    assert!(
        empty.is_empty(),
        "targets without a corpus in fuzz/corpus/: {empty:?}"
    );
    assert!(
        failed.is_empty(),
        "inputs that fail:\n{}",
        failed.join("\n")
    );
}

#[test]
fn every_target_has_a_libfuzzer_wrapper() {
    for (name, _) in flynn_fuzz::TARGETS {
        let wrapper = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        assert!(wrapper.is_file(), "{} is missing", wrapper.display());
    }
}
