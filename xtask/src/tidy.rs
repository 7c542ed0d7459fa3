//! `cargo xtask tidy`: the layer table in docs/ARCHITECTURE.md is the law
//! of dependencies; this compares it with `cargo metadata`.
//!
//! Fails on: a dependency on a crate in the same or a higher layer, a
//! workspace crate missing from the table, `flynn-testkit` used outside
//! dev-dependencies, a crate without `[lints] workspace = true`, and a
//! library whose `lib.rs` does not start with a `//!` doc comment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Where a crate sits. Lower numbers are lower layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    Lib(u8),
    /// Binaries and tools: may depend on any library, nothing depends on them.
    Top,
    /// Test helpers: dev-dependencies only.
    TestOnly,
}

/// One workspace crate as tidy sees it.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub manifest: String,
    pub lib_source: Option<String>,
    /// (dependency name, kind): kind is "normal", "dev" or "build".
    pub deps: Vec<(String, String)>,
}

pub fn run() -> Result<()> {
    let root = crate::project_root();
    let problems = check_workspace(&root)?;
    if problems.is_empty() {
        println!("tidy: ok");
        return Ok(());
    }
    for problem in &problems {
        eprintln!("tidy: {problem}");
    }
    bail!("tidy found {} problem(s)", problems.len())
}

/// Runs every check on the workspace at `root`.
pub fn check_workspace(root: &Path) -> Result<Vec<String>> {
    let architecture = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))
        .context("reading docs/ARCHITECTURE.md")?;
    let layers = parse_layers(&architecture)?;
    let packages = load_packages(root)?;
    let mut problems = check(&layers, &packages);
    problems.extend(check_unsafe(root)?);
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    problems.extend(release_panic_problem(&manifest));
    Ok(problems)
}

/// The shipped binaries must unwind: every place that catches a panic (a
/// turn, an adapter, a webhook, the automation loop) is dead code under
/// `panic = "abort"`, and one bug would take the daemon down.
pub fn release_panic_problem(manifest: &str) -> Option<String> {
    let mut in_release = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_release = line == "[profile.release]";
        } else if in_release
            && line.replace(' ', "").starts_with("panic=")
            && !line.replace(' ', "").starts_with("panic=\"unwind\"")
        {
            return Some(format!(
                "Cargo.toml: [profile.release] sets `{line}`; it must be `panic = \"unwind\"` so a panic is caught where it happens instead of ending the daemon"
            ));
        }
    }
    None
}

/// The only files allowed to opt out of the workspace's `unsafe_code =
/// "deny"`, and why. Everything else stays safe Rust.
pub const UNSAFE_ALLOWED: &[(&str, &str)] = &[(
    "crates/memory/src/vector.rs",
    "registers sqlite-vec's C entry point with SQLite",
)];

/// Fails on `allow(unsafe_code)` (or `expect`) outside [`UNSAFE_ALLOWED`].
fn check_unsafe(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut pending = vec![root.join("crates"), root.join("bins"), root.join("xtask")];
    while let Some(dir) = pending.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            problems.extend(unsafe_problems(&relative, &text));
        }
    }
    Ok(problems)
}

/// What [`check_unsafe`] says of one file.
pub fn unsafe_problems(relative: &str, text: &str) -> Option<String> {
    let opts_out = text.lines().any(|line| {
        let line = line.replace(' ', "");
        (line.starts_with("#[") || line.starts_with("#!["))
            && (line.contains("allow(unsafe_code") || line.contains("expect(unsafe_code"))
    });
    (opts_out && !UNSAFE_ALLOWED.iter().any(|(file, _)| *file == relative)).then(|| {
        format!("{relative}: allows unsafe code; only the files in xtask's UNSAFE_ALLOWED may")
    })
}

/// Reads the layer table: rows `| <layer> | `crate` ... |` where layer is a
/// number, `bins` or `test`.
pub fn parse_layers(markdown: &str) -> Result<BTreeMap<String, Layer>> {
    let mut layers = BTreeMap::new();
    for line in markdown.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[0].is_empty() {
            continue;
        }
        let layer = match cells[1] {
            "bins" => Layer::Top,
            "test" => Layer::TestOnly,
            n => match n.parse::<u8>() {
                Ok(n) => Layer::Lib(n),
                Err(_) => continue,
            },
        };
        for name in cells[2].split('`').skip(1).step_by(2) {
            layers.insert(name.to_owned(), layer);
        }
    }
    if layers.is_empty() {
        bail!(
            "docs/ARCHITECTURE.md has no layer table (rows like `| 0 | `flynn-protocol` | ... |`)"
        );
    }
    Ok(layers)
}

fn load_packages(root: &Path) -> Result<Vec<Package>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let mut packages = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let name = package["name"].as_str().unwrap_or_default().to_owned();
        let manifest_path = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let manifest = std::fs::read_to_string(&manifest_path)
            .with_context(|| format!("reading {}", manifest_path.display()))?;
        let lib_source = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "lib"))
            })
            .and_then(|t| t["src_path"].as_str())
            .map(std::fs::read_to_string)
            .transpose()?;
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                (
                    d["name"].as_str().unwrap_or_default().to_owned(),
                    d["kind"].as_str().unwrap_or("normal").to_owned(),
                )
            })
            .collect();
        packages.push(Package {
            name,
            manifest,
            lib_source,
            deps,
        });
    }
    Ok(packages)
}

/// The checks themselves, on plain data so tests can feed them anything.
pub fn check(layers: &BTreeMap<String, Layer>, packages: &[Package]) -> Vec<String> {
    let mut problems = Vec::new();
    for package in packages {
        let Some(&layer) = layers.get(&package.name) else {
            problems.push(format!(
                "{} is not in the layer table of docs/ARCHITECTURE.md",
                package.name
            ));
            continue;
        };
        if !has_workspace_lints(&package.manifest) {
            problems.push(format!(
                "{}: Cargo.toml lacks `[lints] workspace = true`",
                package.name
            ));
        }
        if let Some(source) = &package.lib_source
            && !source.trim_start().starts_with("//!")
        {
            problems.push(format!(
                "{}: lib.rs must start with a `//!` doc comment saying what the crate is for",
                package.name
            ));
        }
        for (dep, kind) in &package.deps {
            let Some(&dep_layer) = layers.get(dep) else {
                continue; // not a workspace crate
            };
            if dep_layer == Layer::TestOnly {
                if kind != "dev" {
                    problems.push(format!(
                        "{} depends on {dep} outside [dev-dependencies]; test helpers are for tests only",
                        package.name
                    ));
                }
                continue;
            }
            if kind == "dev" {
                continue;
            }
            let allowed = match (layer, dep_layer) {
                (Layer::Lib(own), Layer::Lib(theirs)) => theirs < own,
                (Layer::Top | Layer::TestOnly, Layer::Lib(_)) => true,
                _ => false,
            };
            if !allowed {
                problems.push(format!(
                    "{} ({}) depends on {dep} ({}): a crate may depend only on lower layers",
                    package.name,
                    describe(layer),
                    describe(dep_layer)
                ));
            }
        }
    }
    problems
}

fn describe(layer: Layer) -> String {
    match layer {
        Layer::Lib(n) => format!("layer {n}"),
        Layer::Top => "bins".to_owned(),
        Layer::TestOnly => "test".to_owned(),
    }
}

fn has_workspace_lints(manifest: &str) -> bool {
    let mut in_lints = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_lints = line == "[lints]";
            continue;
        }
        if in_lints && line.replace(' ', "") == "workspace=true" {
            return true;
        }
    }
    manifest
        .lines()
        .any(|l| l.replace(' ', "") == "lints.workspace=true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_code_is_allowed_only_where_listed() {
        let opt_out = "fn f() {\n#[allow(unsafe_code)]\nunsafe {}\n}";
        assert_eq!(
            unsafe_problems("crates/memory/src/vector.rs", opt_out),
            None
        );
        let problem = unsafe_problems("crates/tools/src/lib.rs", opt_out);
        assert!(problem.is_some_and(|p| p.contains("crates/tools/src/lib.rs")));
        assert_eq!(
            unsafe_problems(
                "crates/tools/src/lib.rs",
                "// allow(unsafe_code) is not used here"
            ),
            None
        );
    }

    const TABLE: &str = "
| layer | crate | owns |
|---|---|---|
| 0 | `flynn-protocol` | data |
| 1 | `flynn-models`, `flynn-tools` | models, tools |
| 3 | `flynn-orchestrator` | loop |
| bins | `flynn` | cli |
| test | `flynn-testkit` | fakes |
";

    fn package(name: &str, deps: &[(&str, &str)]) -> Package {
        Package {
            name: name.to_owned(),
            manifest: "[package]\n\n[lints]\nworkspace = true\n".to_owned(),
            lib_source: Some("//! Docs.\n".to_owned()),
            deps: deps
                .iter()
                .map(|(d, k)| ((*d).to_owned(), (*k).to_owned()))
                .collect(),
        }
    }

    fn layers() -> BTreeMap<String, Layer> {
        parse_layers(TABLE).unwrap_or_default()
    }

    #[test]
    fn reads_every_crate_of_the_table() {
        let layers = layers();
        assert_eq!(layers.get("flynn-tools"), Some(&Layer::Lib(1)));
        assert_eq!(layers.get("flynn"), Some(&Layer::Top));
        assert_eq!(layers.get("flynn-testkit"), Some(&Layer::TestOnly));
        assert_eq!(layers.len(), 6);
    }

    #[test]
    fn downward_edges_pass() {
        let packages = [
            package("flynn-protocol", &[]),
            package(
                "flynn-models",
                &[("flynn-protocol", "normal"), ("flynn-testkit", "dev")],
            ),
            package("flynn-orchestrator", &[("flynn-models", "normal")]),
            package("flynn", &[("flynn-orchestrator", "normal")]),
        ];
        assert_eq!(check(&layers(), &packages), Vec::<String>::new());
    }

    #[test]
    fn an_upward_edge_fails() {
        let packages = [package("flynn-models", &[("flynn-orchestrator", "normal")])];
        assert_eq!(
            check(&layers(), &packages),
            [
                "flynn-models (layer 1) depends on flynn-orchestrator (layer 3): a crate may depend only on lower layers"
            ]
        );
    }

    #[test]
    fn a_same_layer_edge_fails() {
        let packages = [package("flynn-models", &[("flynn-tools", "build")])];
        assert_eq!(
            check(&layers(), &packages),
            [
                "flynn-models (layer 1) depends on flynn-tools (layer 1): a crate may depend only on lower layers"
            ]
        );
    }

    #[test]
    fn testkit_outside_dev_dependencies_fails() {
        let packages = [package("flynn-models", &[("flynn-testkit", "normal")])];
        assert_eq!(
            check(&layers(), &packages),
            [
                "flynn-models depends on flynn-testkit outside [dev-dependencies]; test helpers are for tests only"
            ]
        );
    }

    #[test]
    fn missing_lints_docs_and_table_rows_fail() {
        let mut bare = package("flynn-tools", &[]);
        bare.manifest = "[package]\nname = \"flynn-tools\"\n".to_owned();
        bare.lib_source = Some("pub fn f() {}\n".to_owned());
        let packages = [bare, package("flynn-extra", &[])];
        assert_eq!(
            check(&layers(), &packages),
            [
                "flynn-tools: Cargo.toml lacks `[lints] workspace = true`",
                "flynn-tools: lib.rs must start with a `//!` doc comment saying what the crate is for",
                "flynn-extra is not in the layer table of docs/ARCHITECTURE.md",
            ]
        );
    }

    #[test]
    fn a_release_profile_that_aborts_on_panic_fails() {
        let aborting = "[profile.release]\nlto = \"fat\"\npanic = \"abort\"\n";
        assert!(release_panic_problem(aborting).is_some());
        let unwinding = "[profile.release]\npanic = \"unwind\"\n[profile.dev]\npanic = \"abort\"\n";
        assert_eq!(release_panic_problem(unwinding), None);
    }

    /// The real workspace obeys the table: `cargo test` catches drift.
    #[test]
    fn the_workspace_is_tidy() {
        let problems = check_workspace(&crate::project_root());
        assert_eq!(problems.map_err(|e| e.to_string()), Ok(Vec::new()));
    }
}
