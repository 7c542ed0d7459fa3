//! `cargo xtask chaos`: the crash and panic tests against the release
//! build. Builds `flynn` in the release profile with the chat channels and
//! fault injection (`FLYNN_FAULTS`), then runs `tests/it/chaos.rs` (SIGKILL
//! at random points, 10 rounds of 100 messages by default) and
//! `tests/it/panics.rs` with that binary in place of the test build's.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub fn run(args: &[String]) -> Result<()> {
    let value = |flag: &str, default: &str| -> String {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    };
    let rounds = value("--rounds", "10");
    let messages = value("--messages", "100");
    for (flag, text) in [("--rounds", &rounds), ("--messages", &messages)] {
        text.parse::<usize>()
            .with_context(|| format!("{flag} takes a number, not '{text}'"))?;
    }
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let features = "channels,fault-injection";
    eprintln!("xtask chaos: building flynn (release, --features {features})");
    let status = Command::new(&cargo)
        .args(["build", "--release", "-p", "flynn", "--features", features])
        .current_dir(&root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release failed ({status})");
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let binary = target.join("release/flynn");
    if !binary.is_file() {
        bail!("{} was not built", binary.display());
    }
    eprintln!(
        "xtask chaos: {rounds} rounds of {messages} messages against {}",
        binary.display()
    );
    let status = Command::new(&cargo)
        .args([
            "test",
            "-p",
            "flynn",
            "--features",
            features,
            "--test",
            "it",
            "--",
            "chaos",
            "panics",
            "--nocapture",
        ])
        .env("FLYNN_TEST_BIN", &binary)
        .env("FLYNN_CHAOS_ROUNDS", &rounds)
        .env("FLYNN_CHAOS_MESSAGES", &messages)
        .current_dir(&root)
        .status()
        .context("running cargo test")?;
    if !status.success() {
        bail!("the chaos tests failed against the release build ({status})");
    }
    Ok(())
}
