//! Project automation for Flynn: `cargo xtask <codegen|tidy|ci|bench|chaos|soak|fuzz>`.

use anyhow::{Result, bail};

mod bench;
mod codegen;
mod fuzz;
mod reliability;
mod tidy;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("codegen") => codegen::run(),
        Some("tidy") => tidy::run(),
        Some("bench") => bench::run(&args[1..]),
        Some("chaos") => reliability::chaos(&args[1..]),
        Some("soak") => reliability::soak(&args[1..]),
        Some("ci") => ci(),
        Some("fuzz") => fuzz::run(&args[1..]),
        _ => bail!(
            "usage: cargo xtask <command>\n\ncommands:\n  codegen  regenerate config/flynn.schema.json and docs/protocol.schema.json\n  tidy     check the layer table, lints, crate docs and the paths ARCHITECTURE.md's \"Where things live\" names\n  ci       run everything CI runs (same as .ci/run)\n  bench    run the whole-process benchmarks and write docs/benchmarks.md\n  chaos    the crash (SIGKILL) and panic tests against the release build [--rounds N] [--messages N]\n  soak     30 minutes of mixed traffic against the release build, sampling memory, tasks and descriptors [--minutes N]\n  fuzz     run the fuzz targets (nightly; --seconds N, --runs N, --target NAME)"
        ),
    }
}

fn ci() -> Result<()> {
    let status = std::process::Command::new(project_root().join(".ci/run")).status()?;
    if !status.success() {
        bail!(".ci/run failed ({status})");
    }
    Ok(())
}

/// The workspace root (the parent of `xtask/`). Read from the environment
/// `cargo run` sets, so a binary built for another checkout sharing the
/// target directory (CI keeps one cache for every clone, and cargo may
/// reuse a binary it linked for another path) works on this one.
pub fn project_root() -> std::path::PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent()
        .map_or_else(|| dir.clone(), std::path::Path::to_path_buf)
}
