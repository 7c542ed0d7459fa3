//! `cargo xtask fuzz [--seconds N] [--runs N] [--target NAME]...`: runs
//! the libFuzzer targets of `fuzz/` one after another (nightly,
//! cargo-fuzz, installed by `scripts/install-fuzz.sh` when missing) and
//! prints the executions of each. Fuzzing is never part of CI: `cargo
//! test` replays the committed corpus instead (crates/fuzz/tests).
//!
//! Each target reads its committed corpus (`fuzz/corpus/<target>/`) and
//! writes what it finds to a working corpus under the target directory;
//! a crash is saved under `fuzz/artifacts/<target>/`. See
//! docs/fuzzing.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// How long each target runs (`--seconds`).
    pub seconds: Option<u64>,
    /// Stop each target after this many executions (`--runs`).
    pub runs: Option<u64>,
    /// The targets to run; every target when empty.
    pub targets: Vec<String>,
}

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--runs N] [--target NAME]...";

/// Reads the arguments after `fuzz`.
pub fn parse_args(args: &[String]) -> Result<Options> {
    let mut options = Options {
        seconds: None,
        runs: None,
        targets: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))
                .cloned()
        };
        match arg.as_str() {
            "--seconds" => {
                let text = value("--seconds")?;
                options.seconds = Some(
                    text.parse()
                        .with_context(|| format!("--seconds {text}: expected a whole number"))?,
                );
            }
            "--runs" => {
                let text = value("--runs")?;
                options.runs = Some(
                    text.parse()
                        .with_context(|| format!("--runs {text}: expected a whole number"))?,
                );
            }
            "--target" => options.targets.push(value("--target")?),
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    Ok(options)
}

impl Options {
    /// How long each target may run: `--seconds`, else unbounded when
    /// `--runs` is given (a million runs of a slow target take longer than
    /// any default), else a minute.
    pub fn time_limit(&self) -> Option<u64> {
        match (self.seconds, self.runs) {
            (Some(seconds), _) => Some(seconds),
            (None, Some(_)) => None,
            (None, None) => Some(60),
        }
    }
}

/// The targets under `fuzz/fuzz_targets/`, by name.
pub fn targets(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("fuzz/fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// The longest input libFuzzer makes for a target, where longer ones
/// only cost time (libFuzzer's own default is the longest committed input,
/// at least 4,096 bytes). `web`: readability's work grows with the page,
/// and every structure it treats differently (nesting past 256 levels,
/// tables, lists, scripts) fits in 4 KB; its 24 KB seed of 2,000 nested
/// quotes is read cut to 4 KB (340 levels) and replayed whole by `cargo
/// test`.
pub fn max_len(target: &str) -> Option<usize> {
    match target {
        "web" => Some(4096),
        _ => None,
    }
}

/// Reads libFuzzer's final statistics: (executions, seconds).
pub fn executions(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr.lines().rev().find(|l| l.starts_with("Done "))?;
    // "Done 1000000 runs in 42 second(s)"
    let mut words = line.split_whitespace().skip(1);
    let runs = words.next()?.parse().ok()?;
    let seconds = words.nth(2)?.parse().ok()?;
    Some((runs, seconds))
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse_args(args)?;
    let root = crate::project_root();
    let status = Command::new(root.join("scripts/install-fuzz.sh"))
        .status()
        .context("running scripts/install-fuzz.sh")?;
    if !status.success() {
        bail!("scripts/install-fuzz.sh failed ({status}): cargo-fuzz is needed");
    }
    let all = targets(&root)?;
    let chosen = if options.targets.is_empty() {
        all.clone()
    } else {
        for name in &options.targets {
            if !all.contains(name) {
                bail!("no fuzz target {name}; the targets are {}", all.join(", "));
            }
        }
        options.targets.clone()
    };
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("fuzz");
    let mut report = Vec::new();
    let mut failed = Vec::new();
    for name in &chosen {
        let work = target_dir.join("corpus").join(name);
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let mut command = Command::new("cargo");
        command
            .current_dir(&root)
            .args([
                "+nightly",
                "fuzz",
                "run",
                "--sanitizer",
                "none",
                "--debug-assertions",
            ])
            .arg("--target-dir")
            .arg(&target_dir);
        // Only the gateway's target builds the whole daemon.
        if name != "gateway" {
            command.arg("--no-default-features");
        }
        command
            .arg(name)
            .arg(&work)
            .arg(root.join("fuzz/corpus").join(name))
            .arg("--")
            .arg("-timeout=10")
            .arg("-rss_limit_mb=4096")
            .arg("-print_final_stats=1");
        if let Some(seconds) = options.time_limit() {
            command.arg(format!("-max_total_time={seconds}"));
        }
        if let Some(runs) = options.runs {
            command.arg(format!("-runs={runs}"));
        }
        if let Some(len) = max_len(name) {
            command.arg(format!("-max_len={len}"));
        }
        println!("fuzz: {name}");
        let started = Instant::now();
        let output = command
            .output()
            .with_context(|| format!("running cargo fuzz run {name}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let (runs, seconds) = executions(&stderr).unwrap_or((0, started.elapsed().as_secs()));
        report.push((name.clone(), runs, seconds, output.status.success()));
        if !output.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
            eprintln!("fuzz: {name} failed:");
            for line in tail.into_iter().rev() {
                eprintln!("  {line}");
            }
            failed.push(name.clone());
        }
    }
    println!("\n| target | executions | seconds | result |\n|---|---|---|---|");
    for (name, runs, seconds, ok) in &report {
        let result = if *ok { "ok" } else { "FAILED" };
        println!("| {name} | {runs} | {seconds} | {result} |");
    }
    if !failed.is_empty() {
        bail!(
            "fuzzing found failures in {}; the inputs are under fuzz/artifacts/",
            failed.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn arguments_are_read() {
        let options =
            parse_args(&args("--seconds 5 --target sse --target cron --runs 10")).unwrap();
        assert_eq!(
            options,
            Options {
                seconds: Some(5),
                runs: Some(10),
                targets: vec!["sse".to_owned(), "cron".to_owned()],
            }
        );
        // A minute by default; with --runs alone, as long as the runs take.
        assert_eq!(parse_args(&[]).unwrap().time_limit(), Some(60));
        assert_eq!(parse_args(&args("--runs 10")).unwrap().time_limit(), None);
        assert_eq!(
            parse_args(&args("--runs 10 --seconds 5"))
                .unwrap()
                .time_limit(),
            Some(5)
        );
        assert!(parse_args(&args("--seconds")).is_err());
        assert!(parse_args(&args("--seconds x")).is_err());
        assert!(parse_args(&args("--jobs 2")).is_err());
    }

    #[test]
    fn final_statistics_are_read() {
        let stderr = "#1000 DONE cov: 10\nstat::number_of_executed_units: 1000000\nDone 1000000 runs in 42 second(s)\n";
        assert_eq!(executions(stderr), Some((1_000_000, 42)));
        assert_eq!(executions("crashed"), None);
    }

    #[test]
    fn every_target_is_found() {
        let names = targets(&crate::project_root()).unwrap();
        assert!(names.contains(&"sse".to_owned()), "{names:?}");
    }
}
