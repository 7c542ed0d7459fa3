//! `cargo xtask bench`: runs the whole-process benchmarks on an optimised
//! build and writes the results, with the targets from SPEC.md, to
//! `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// (case key, what is measured, target in milliseconds)
const CASES: &[(&str, &str, f64)] = &[
    ("version", "`flynn --version`", 3.0),
    (
        "send",
        "`flynn send` one turn against a local server that answers at once",
        10.0,
    ),
];

pub fn run(args: &[String]) -> Result<()> {
    let root = crate::project_root();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(100), |v| v.parse::<usize>())
        .context("--runs takes a number")?;
    let out = std::env::temp_dir().join(format!("flynn-bench-{}.json", std::process::id()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args(["bench", "-p", "flynn", "--bench", "process"])
        .env("FLYNN_BENCH_OUT", &out)
        .env("FLYNN_BENCH_RUNS", runs.to_string())
        .current_dir(&root)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    let results: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let _ = std::fs::remove_file(&out);
    let markdown = render(&results, &machine());
    std::fs::write(root.join("docs/benchmarks.md"), &markdown)?;
    print!("{markdown}");
    Ok(())
}

fn machine() -> String {
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    format!(
        "{} cores, {} {}, {}, commit {}, {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        output("uname", &["-s"]),
        output("uname", &["-m"]),
        output("rustc", &["--version"]),
        output("git", &["rev-parse", "--short", "HEAD"]),
        output("date", &["-u", "+%Y-%m-%d"]),
    )
}

fn render(results: &Value, machine: &str) -> String {
    let mut md = String::from(
        "# Benchmarks\n\nWritten by `cargo xtask bench`; do not edit by hand. Whole-process wall time of the\nrelease binary, started afresh for every run (after 5 warm-up runs).\n\n",
    );
    let _ = writeln!(
        md,
        "Machine: {machine}. Runs per case: {}.\n",
        results["runs"]
    );
    md.push_str("| case | target | median | p90 | min | verdict |\n|---|---|---|---|---|---|\n");
    for (key, what, target) in CASES {
        let case = &results[*key];
        let median = case["median_ms"].as_f64().unwrap_or(f64::NAN);
        let verdict = if median <= *target { "meets" } else { "misses" };
        let _ = writeln!(
            md,
            "| {what} | ≤ {target} ms | {median:.2} ms | {:.2} ms | {:.2} ms | {verdict} |",
            case["p90_ms"].as_f64().unwrap_or(f64::NAN),
            case["min_ms"].as_f64().unwrap_or(f64::NAN),
        );
    }
    let _ = writeln!(
        md,
        "\nA plain `flynn send` turn sent {} bytes of JSON to the model (target: at most 3.5 KB\nwith the default tools offered).",
        results["send_request_bytes"]
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_row_per_case_with_a_verdict() {
        let results = serde_json::json!({
            "runs": 10,
            "version": {"median_ms": 1.5, "p90_ms": 2.0, "min_ms": 1.0},
            "send": {"median_ms": 12.25, "p90_ms": 15.0, "min_ms": 11.0},
            "send_request_bytes": 1234,
        });
        let md = render(&results, "test machine");
        assert!(
            md.contains("Machine: test machine. Runs per case: 10."),
            "{md}"
        );
        assert!(
            md.contains("| `flynn --version` | ≤ 3 ms | 1.50 ms | 2.00 ms | 1.00 ms | meets |"),
            "{md}"
        );
        assert!(
            md.contains("| ≤ 10 ms | 12.25 ms | 15.00 ms | 11.00 ms | misses |"),
            "{md}"
        );
        assert!(md.contains("sent 1234 bytes"), "{md}");
    }
}
