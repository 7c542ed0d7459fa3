//! `cargo xtask chaos` and `cargo xtask soak`: the long reliability tests
//! against the release build. Both build `flynn` in the release profile
//! with the chat channels and fault injection (`FLYNN_FAULTS`; inert unless
//! set), then run tests of `bins/flynn/tests/it` with that binary in place
//! of the test build's (`FLYNN_TEST_BIN`):
//!
//! - chaos: `chaos.rs` (SIGKILL at random points, 10 rounds of 100
//!   messages by default) and `panics.rs`;
//! - soak: `soak.rs` (30 minutes of mixed traffic by default, sampling
//!   memory, tasks and descriptors every 10 s).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

const FEATURES: &str = "channels,fault-injection";

/// The value after `flag` in `args`, checked to be a number.
fn number(args: &[String], flag: &str, default: &str) -> Result<String> {
    let text = args
        .iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_owned());
    text.parse::<u64>()
        .with_context(|| format!("{flag} takes a number, not '{text}'"))?;
    Ok(text)
}

pub fn chaos(args: &[String]) -> Result<()> {
    let rounds = number(args, "--rounds", "10")?;
    let messages = number(args, "--messages", "100")?;
    let binary = build_release("chaos")?;
    eprintln!(
        "xtask chaos: {rounds} rounds of {messages} messages against {}",
        binary.display()
    );
    run_tests(
        "chaos",
        &binary,
        &["chaos", "panics"],
        &[
            ("FLYNN_CHAOS_ROUNDS", &rounds),
            ("FLYNN_CHAOS_MESSAGES", &messages),
        ],
    )
}

pub fn soak(args: &[String]) -> Result<()> {
    let minutes = number(args, "--minutes", "30")?;
    let seconds = (minutes.parse::<u64>()? * 60).to_string();
    let binary = build_release("soak")?;
    eprintln!(
        "xtask soak: {minutes} minutes of mixed traffic against {}",
        binary.display()
    );
    run_tests(
        "soak",
        &binary,
        &["soak"],
        &[("FLYNN_SOAK_SECONDS", &seconds)],
    )
}

fn build_release(task: &str) -> Result<PathBuf> {
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("xtask {task}: building flynn (release, --features {FEATURES})");
    let status = Command::new(&cargo)
        .args(["build", "--release", "-p", "flynn", "--features", FEATURES])
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
    Ok(binary)
}

fn run_tests(
    task: &str,
    binary: &PathBuf,
    filters: &[&str],
    vars: &[(&str, &String)],
) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(&cargo);
    command
        .args([
            "test",
            "-p",
            "flynn",
            "--features",
            FEATURES,
            "--test",
            "it",
            "--",
        ])
        .args(filters)
        .arg("--nocapture")
        .env("FLYNN_TEST_BIN", binary)
        .current_dir(crate::project_root());
    for (name, value) in vars {
        command.env(name, value);
    }
    let status = command.status().context("running cargo test")?;
    if !status.success() {
        bail!("the {task} tests failed against the release build ({status})");
    }
    Ok(())
}
