use std::fmt;
use std::path::PathBuf;

use crate::Tier;

/// What went wrong with a skill.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `manifest.json` that does not parse or breaks a rule.
    #[error("{}: {problem}", location(.path, *.line, *.column, .field.as_deref()))]
    Manifest {
        path: PathBuf,
        /// 1-based, when the problem has a position in the text.
        line: Option<usize>,
        column: Option<usize>,
        /// The field's path (`permissions.tools[0]`); none for the whole file.
        field: Option<String>,
        problem: String,
    },
    /// A skill directory without one of its two files.
    #[error("{}: missing: a skill directory needs {file} ({what})", .path.display())]
    MissingFile {
        path: PathBuf,
        file: &'static str,
        what: &'static str,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No skill has this name.
    #[error("no skill is named '{name}' (`flynn skills list` shows them)")]
    UnknownSkill { name: String },
    /// The skill exists but its requirements are not met here.
    #[error("skill '{name}' is unavailable: {}", .reasons.join("; "))]
    Unavailable { name: String, reasons: Vec<String> },
    /// An install over a managed skill without `force`.
    #[error(
        "skill '{name}' is already installed in {}; remove it first or install with --force to replace it",
        .path.display()
    )]
    AlreadyInstalled { name: String, path: PathBuf },
    /// An install source that is neither a directory nor a `.tar.gz`.
    #[error(
        "{}: cannot install from this: expected a skill directory or a .tar.gz (.tgz) archive",
        .path.display()
    )]
    UnsupportedSource { path: PathBuf },
    /// An entry of an install source that would escape the skill's
    /// directory, or is not a plain file or directory.
    #[error("refusing to install {}: {entry}: {problem}", .from.display())]
    Unsafe {
        from: PathBuf,
        entry: String,
        problem: String,
    },
    /// `remove` of a skill that is not a managed one.
    #[error("{}", not_removable(.name, *.tier, .path.as_ref()))]
    NotRemovable {
        name: String,
        tier: Tier,
        path: Option<PathBuf>,
    },
}

impl Error {
    /// Whether the named skill does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::UnknownSkill { .. })
    }

    /// Whether the install was refused because the skill is already there.
    pub fn is_already_installed(&self) -> bool {
        matches!(self, Error::AlreadyInstalled { .. })
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    pub(crate) fn manifest(
        path: impl Into<PathBuf>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Error {
        Error::Manifest {
            path: path.into(),
            line: None,
            column: None,
            field: Some(field.into()),
            problem: problem.into(),
        }
    }
}

fn not_removable(name: &str, tier: Tier, path: Option<&PathBuf>) -> String {
    match (tier, path) {
        (Tier::Workspace, Some(path)) => format!(
            "skill '{name}' is a workspace skill: {} is your own directory, so Flynn does not delete it; remove it yourself if you no longer want it",
            path.display()
        ),
        (Tier::Bundled, _) => format!(
            "skill '{name}' is bundled with Flynn and cannot be removed; a managed or workspace skill named '{name}' overrides it"
        ),
        (tier, _) => format!("skill '{name}' is a {tier} skill and cannot be removed"),
    }
}

fn location<'a>(
    path: &'a PathBuf,
    line: Option<usize>,
    column: Option<usize>,
    field: Option<&'a str>,
) -> ManifestLocation<'a> {
    ManifestLocation {
        path,
        line,
        column,
        field,
    }
}

struct ManifestLocation<'a> {
    path: &'a PathBuf,
    line: Option<usize>,
    column: Option<usize>,
    field: Option<&'a str>,
}

impl fmt::Display for ManifestLocation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if let Some(field) = self.field {
            write!(f, ": {field}")?;
        }
        Ok(())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
