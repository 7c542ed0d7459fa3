//! `cargo xtask tidy`: the layer table in docs/ARCHITECTURE.md is the law
//! of dependencies; this compares it with `cargo metadata`.
//!
//! Fails on: a dependency on a crate in the same or a higher layer, a
//! workspace crate missing from the table, `flynn-testkit` used outside
//! dev-dependencies, a crate without `[lints] workspace = true`, and a
//! library whose `lib.rs` does not start with a `//!` doc comment.
//!
//! It also holds the doc's "Where things live" table (task → file) to the
//! tree: every path in its "Look in" column must exist, and every name in
//! its "Start at" column must be in one of its row's files. And the
//! numbers the doc quotes from the code ([`NUMBER_CLAIMS`]) must be the
//! code's.

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
    problems.extend(where_problems(&architecture, &|path| read_tree(root, path)));
    problems.extend(number_problems(&architecture, NUMBER_CLAIMS, &|path| {
        read_tree(root, path)
    }));
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

/// The heading of the task → file table near the top of
/// docs/ARCHITECTURE.md.
pub const WHERE_HEADING: &str = "## Where things live";

/// What the "Where things live" table of `markdown` names that is not in
/// the tree: a path in its "Look in" column (in backticks, relative to the
/// repository root) that does not exist, or a name in its "Start at"
/// column (`Type`, `function`, `Type::method`) with a part that is a word
/// of none of the row's files. `read` gives the text under a path (a file's, or that
/// of every file below a directory) or `None` when nothing is there.
pub fn where_problems(markdown: &str, read: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let lines: Vec<&str> = markdown.lines().collect();
    let Some(start) = lines.iter().position(|l| l.trim() == WHERE_HEADING) else {
        return vec![format!(
            "docs/ARCHITECTURE.md has no `{WHERE_HEADING}` section: the table of task → file a newcomer starts from"
        )];
    };
    let rows: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .take_while(|(_, l)| !l.starts_with('#'))
        .filter(|(_, l)| l.trim_start().starts_with('|'))
        .map(|(i, l)| (i + 1, l.trim()))
        .collect();
    let is_separator = |row: &str| row.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '));
    if rows.len() < 3 || !is_separator(rows[1].1) {
        return vec![format!(
            "docs/ARCHITECTURE.md:{}: `{WHERE_HEADING}` has no table (a header `| To work on… | Look in | Start at |`, a `|---|---|---|` line, then one row per task)",
            start + 1
        )];
    }
    let mut problems = Vec::new();
    for &(line, row) in &rows[2..] {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let at = format!("docs/ARCHITECTURE.md:{line}: \"Where things live\"");
        let [_, task, files, names, ..] = cells[..] else {
            problems.push(format!(
                "{at}: the row `{row}` has {} column(s); expected 3 (task, files, names)",
                cells.len().saturating_sub(2)
            ));
            continue;
        };
        let row_is = format!("{at}, row \"{task}\"");
        let paths = backticked(files);
        if paths.is_empty() {
            problems.push(format!(
                "{row_is}: names no file; put each path in backticks in the second column"
            ));
            continue;
        }
        let mut texts = Vec::new();
        let mut all_there = true;
        for path in paths {
            if path.starts_with('/') || path.split('/').any(|part| part == "..") {
                problems.push(format!(
                    "{row_is}: `{path}` is not a path inside the repository; write it from the repository root, like `crates/core/src/lib.rs`"
                ));
                all_there = false;
            } else if let Some(text) = read(path) {
                texts.push(text);
            } else {
                problems.push(format!("{row_is}: `{path}` does not exist"));
                all_there = false;
            }
        }
        // Names are looked for once every path is right, so a moved file
        // is one problem, not one per name.
        if !all_there {
            continue;
        }
        for name in backticked(names).into_iter().filter(|n| is_code_name(n)) {
            let found = name
                .trim_end_matches("()")
                .split("::")
                .all(|part| texts.iter().any(|text| has_word(text, part)));
            if !found {
                problems.push(format!(
                    "{row_is}: `{name}` is in none of the row's files ({}); name where it lives now",
                    backticked(files).join(", ")
                ));
            }
        }
    }
    problems
}

/// Numbers docs/ARCHITECTURE.md states that a constant in the code
/// defines: (file, constant, the doc's words with `{}` for the number,
/// written with thousands separators). They drifted before: the session's
/// event ring was "4,096 deep" in one section and 1,024 in another.
pub const NUMBER_CLAIMS: &[(&str, &str, &str)] = &[
    (
        "crates/orchestrator/src/events.rs",
        "SESSION_CAPACITY",
        "broadcast per session ({} deep)",
    ),
    (
        "crates/orchestrator/src/events.rs",
        "GLOBAL_CAPACITY",
        "and a global one ({} deep)",
    ),
    (
        "crates/orchestrator/src/events.rs",
        "SESSION_CAPACITY",
        "the session's ring ({} slots)",
    ),
    (
        "crates/orchestrator/src/events.rs",
        "GLOBAL_CAPACITY",
        "and the global one ({})",
    ),
    (
        "crates/orchestrator/src/runtime.rs",
        "LANE_OPS",
        "bounded channel ({} operations)",
    ),
];

/// Where `markdown` does not say what `claims` expect from the code. Line
/// breaks in the doc count as spaces.
pub fn number_problems(
    markdown: &str,
    claims: &[(&str, &str, &str)],
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let doc = markdown.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut problems = Vec::new();
    for &(file, constant, words) in claims {
        let Some(source) = read(file) else {
            problems.push(format!(
                "{file} does not exist; tidy reads `{constant}` there to check docs/ARCHITECTURE.md (update xtask's NUMBER_CLAIMS)"
            ));
            continue;
        };
        let Some(value) = constant_value(&source, constant) else {
            problems.push(format!(
                "{file} has no `const {constant}: … = <number>;`; tidy reads it to check docs/ARCHITECTURE.md (update xtask's NUMBER_CLAIMS)"
            ));
            continue;
        };
        let expected = words.replace("{}", &with_separators(value));
        if !doc.contains(&expected) {
            problems.push(format!(
                "docs/ARCHITECTURE.md does not say \"{expected}\": `{constant}` in {file} is {value}; correct the number in the doc (or the claim in xtask's NUMBER_CLAIMS if the sentence was reworded)"
            ));
        }
    }
    problems
}

/// The value of `const <name>: <type> = <number>;` in `source`.
fn constant_value(source: &str, name: &str) -> Option<u64> {
    let declaration = format!("const {name}:");
    source.lines().find_map(|line| {
        let rest = &line[line.find(&declaration)? + declaration.len()..];
        let value = rest.split_once('=')?.1.split_once(';')?.0;
        value.trim().replace('_', "").parse().ok()
    })
}

/// `16384` as `16,384`.
fn with_separators(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The spans of `cell` written in backticks.
fn backticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether `name` looks like a Rust or JavaScript path (`Type::method`,
/// `CONST`, `function()`), as opposed to a command or a URL, which are not
/// checked.
fn is_code_name(name: &str) -> bool {
    name.trim_end_matches("()").split("::").all(|part| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Whether `word` occurs in `text` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(ident)
            && !text[at + word.len()..].chars().next().is_some_and(ident)
    })
}

/// The text under `relative`: the file's, or every file's below the
/// directory; `None` when there is nothing there. Files that are not UTF-8
/// (images) count as empty.
fn read_tree(root: &Path, relative: &str) -> Option<String> {
    let path = root.join(relative);
    if path.is_file() {
        return Some(std::fs::read_to_string(&path).unwrap_or_default());
    }
    if !path.is_dir() {
        return None;
    }
    let mut text = String::new();
    let mut pending = vec![path];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                text.push('\n');
            }
        }
    }
    Some(text)
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

    const WHERE: &str = "
# Doc

## Where things live

| To work on… | Look in | Start at |
|---|---|---|
| Where a message enters | `crates/orchestrator/src/runtime.rs` | `SessionManager::submit` |
| Commands | `crates/orchestrator/src/commands.rs`, `crates/orchestrator/src/lane.rs` | `Command::parse`, `Lane::status`, `/status` |
| Migrations | `crates/sessions/migrations/` | numbered files |

## 1. Bird's-eye view

| 0 | `crates/not/listed.rs` | a table of another section is not read |
";

    fn tree(path: &str) -> Option<String> {
        match path {
            "crates/orchestrator/src/runtime.rs" => {
                Some("impl SessionManager {\n    pub async fn submit(&self) {}\n}".to_owned())
            }
            "crates/orchestrator/src/commands.rs" => {
                Some("pub enum Command {} fn parse() {}".to_owned())
            }
            "crates/orchestrator/src/lane.rs" => {
                Some("struct Lane; async fn status() {}".to_owned())
            }
            "crates/sessions/migrations/" => Some("CREATE TABLE sessions;".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn a_where_table_whose_paths_and_names_exist_passes() {
        assert_eq!(where_problems(WHERE, &tree), Vec::<String>::new());
    }

    #[test]
    fn a_missing_path_is_reported_with_its_row() {
        let moved = WHERE.replace("src/commands.rs", "src/command.rs");
        assert_eq!(
            where_problems(&moved, &tree),
            [
                "docs/ARCHITECTURE.md:9: \"Where things live\", row \"Commands\": `crates/orchestrator/src/command.rs` does not exist"
            ]
        );
    }

    #[test]
    fn a_name_in_none_of_the_files_is_reported() {
        let renamed = WHERE.replace("`SessionManager::submit`", "`SessionManager::send`");
        assert_eq!(
            where_problems(&renamed, &tree),
            [
                "docs/ARCHITECTURE.md:8: \"Where things live\", row \"Where a message enters\": `SessionManager::send` is in none of the row's files (crates/orchestrator/src/runtime.rs); name where it lives now"
            ]
        );
        // A whole word only: `submit` does not pass for `sub`.
        let part = WHERE.replace("`SessionManager::submit`", "`sub`");
        assert_eq!(where_problems(&part, &tree).len(), 1);
    }

    #[test]
    fn bad_rows_and_a_missing_table_are_reported() {
        let outside = WHERE.replace("`crates/sessions/migrations/`", "`../secrets/`");
        let problems = where_problems(&outside, &tree);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("`../secrets/` is not a path inside the repository"));

        let no_file = WHERE.replace("`crates/sessions/migrations/`", "the migrations");
        let problems = where_problems(&no_file, &tree);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("row \"Migrations\": names no file"));

        let short = WHERE.replace(
            "| Migrations | `crates/sessions/migrations/` | numbered files |",
            "| Migrations |",
        );
        let problems = where_problems(&short, &tree);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("has 1 column(s); expected 3"));

        let gone = WHERE.replace("## Where things live", "## Where things are");
        let problems = where_problems(&gone, &tree);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("has no `## Where things live` section"));

        let bare = "## Where things live\n\nNothing yet.\n";
        let problems = where_problems(bare, &tree);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("docs/ARCHITECTURE.md:1: `## Where things live` has no table")
        );
    }

    const CLAIMS: &[(&str, &str, &str)] = &[
        ("events.rs", "SESSION_CAPACITY", "per session ({} deep)"),
        ("events.rs", "GLOBAL_CAPACITY", "a global one ({} deep)"),
        ("runtime.rs", "LANE_OPS", "channel ({} operations)"),
    ];

    fn sources(path: &str) -> Option<String> {
        match path {
            "events.rs" => Some(
                "pub const SESSION_CAPACITY: usize = 1024;\npub(crate) const GLOBAL_CAPACITY: usize = 16_384;\n"
                    .to_owned(),
            ),
            "runtime.rs" => Some("const LANE_OPS: usize = 64;\n".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn numbers_the_doc_quotes_must_be_the_codes() {
        let doc = "a broadcast per session (1,024 deep) and a global one\n  (16,384 deep); a bounded\nchannel (64 operations)";
        assert_eq!(number_problems(doc, CLAIMS, &sources), Vec::<String>::new());

        let stale = doc.replace("(1,024 deep)", "(4,096 deep)");
        assert_eq!(
            number_problems(&stale, CLAIMS, &sources),
            [
                "docs/ARCHITECTURE.md does not say \"per session (1,024 deep)\": `SESSION_CAPACITY` in events.rs is 1024; correct the number in the doc (or the claim in xtask's NUMBER_CLAIMS if the sentence was reworded)"
            ]
        );

        let moved = [("lane.rs", "LANE_OPS", "channel ({} operations)")];
        let problems = number_problems(doc, &moved, &sources);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("lane.rs does not exist"));

        let renamed = [("runtime.rs", "LANE_OPERATIONS", "channel ({} operations)")];
        let problems = number_problems(doc, &renamed, &sources);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("runtime.rs has no `const LANE_OPERATIONS:"));
    }

    #[test]
    fn numbers_are_written_with_thousands_separators() {
        assert_eq!(with_separators(64), "64");
        assert_eq!(with_separators(1024), "1,024");
        assert_eq!(with_separators(16_384), "16,384");
        assert_eq!(with_separators(1_000_000), "1,000,000");
    }

    /// The real workspace obeys the table: `cargo test` catches drift.
    #[test]
    fn the_workspace_is_tidy() {
        let problems = check_workspace(&crate::project_root());
        assert_eq!(problems.map_err(|e| e.to_string()), Ok(Vec::new()));
    }
}
