//! The bodies of Flynn's fuzz targets: one `pub fn <target>(data: &[u8])`
//! per parser of untrusted input, each asserting what must hold for any
//! input (no panic, and the target's own properties). `fuzz/fuzz_targets/`
//! wraps each in libFuzzer (nightly, `cargo xtask fuzz`);
//! `tests/corpus.rs` replays every committed input on stable, so
//! `cargo test` keeps what fuzzing found fixed. See docs/fuzzing.md.

mod channels;
mod config;
mod models;
mod rest;

pub use channels::{discord, format, slack, telegram, whatsapp};
pub use config::{config_edit, config_expand, config_migrate, config_parse};
pub use models::{retry_hints, sse, vendor_error, wire_events};
#[cfg(feature = "gateway")]
pub use rest::gateway;
pub use rest::{cron, history, memory_chunk, session_keys, skill_archive, skill_manifest, web};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("config_parse", config_parse),
    ("config_edit", config_edit),
    ("config_migrate", config_migrate),
    ("config_expand", config_expand),
    ("sse", sse),
    ("wire_events", wire_events),
    ("retry_hints", retry_hints),
    ("vendor_error", vendor_error),
    ("telegram", telegram),
    ("slack", slack),
    ("discord", discord),
    ("whatsapp", whatsapp),
    ("format", format),
    ("web", web),
    #[cfg(feature = "gateway")]
    ("gateway", gateway),
    ("session_keys", session_keys),
    ("skill_manifest", skill_manifest),
    ("skill_archive", skill_archive),
    ("cron", cron),
    ("memory_chunk", memory_chunk),
    ("history", history),
];

/// Whether inputs that hit a known, not yet fixed panic are skipped
/// (`FLYNN_FUZZ_SKIP_KNOWN=1`), so a local fuzzing run looks past them.
/// Never set by the corpus replay.
pub fn skip_known() -> bool {
    static SKIP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SKIP.get_or_init(|| std::env::var_os("FLYNN_FUZZ_SKIP_KNOWN").is_some_and(|v| v == "1"))
}

/// `data` cut at its first `n - 1` NUL bytes into `n` fields (the last
/// ones empty when there are fewer NULs).
pub(crate) fn fields(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |b| *b == 0).collect();
    while out.len() < n {
        out.push(&[]);
    }
    out
}

/// The bytes as text, invalid UTF-8 replaced.
pub(crate) fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Whether `needle`'s characters appear in `haystack` in order.
pub(crate) fn is_subsequence(needle: impl Iterator<Item = char>, haystack: &str) -> bool {
    let mut rest = haystack.chars();
    needle.into_iter().all(|c| rest.any(|h| h == c))
}
