//! Skills found in the three tiers, merged, gated and indexed.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::environment::{Environment, unmet};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::permissions::Permissions;

/// The file holding a skill's instructions.
pub const SKILL_FILE: &str = "SKILL.md";
/// The file holding a skill's requirements and permissions.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The tool the model calls to read a skill's instructions.
pub const READ_TOOL: &str = "skills.read";

/// Where a skill comes from. A later tier overrides an earlier one: a
/// workspace skill replaces a managed or bundled one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Compiled into Flynn.
    Bundled,
    /// Installed with `flynn skills install`, in `FLYNN_HOME/skills`.
    Managed,
    /// The user's own, in `<workspace>/skills`.
    Workspace,
}

impl Tier {
    /// The tier's name as listings show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Bundled => "bundled",
            Tier::Managed => "managed",
            Tier::Workspace => "workspace",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a skill can be used on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// Requirements are missing, one sentence per missing thing.
    Unavailable {
        reasons: Vec<String>,
    },
}

impl Availability {
    /// Whether the skill can be used.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

#[derive(Debug, Clone)]
enum Body {
    Bundled(&'static str),
    File(PathBuf),
}

/// One usable (if perhaps unavailable) skill.
#[derive(Debug, Clone)]
pub struct Skill {
    pub name: String,
    pub tier: Tier,
    /// Its directory; none for bundled skills.
    pub dir: Option<PathBuf>,
    pub manifest: Manifest,
    pub availability: Availability,
    /// The tier of the skill of the same name this one replaces.
    pub overrides: Option<Tier>,
    body: Body,
}

impl Skill {
    /// Its instructions (`SKILL.md`), read from disk now for a skill with a
    /// directory, so the prompt never carries them until they are used.
    pub fn body(&self) -> Result<Cow<'static, str>> {
        match &self.body {
            Body::Bundled(text) => Ok(Cow::Borrowed(text)),
            Body::File(path) => std::fs::read_to_string(path)
                .map(Cow::Owned)
                .map_err(Error::io(path)),
        }
    }

    /// Its declared permissions, to check calls against; `home` is what `~`
    /// means in its paths.
    pub fn permissions(&self, home: Option<&Path>) -> Permissions {
        Permissions::new(&self.name, &self.manifest.permissions, home)
    }

    /// Whether it can be used.
    pub fn is_available(&self) -> bool {
        self.availability.is_available()
    }
}

/// A skill directory (or bundled skill) that could not be loaded.
#[derive(Debug)]
pub struct Broken {
    /// The directory's name, or the bundled skill's.
    pub name: String,
    pub tier: Tier,
    /// The directory (or the tier's directory, when it could not be read).
    pub dir: Option<PathBuf>,
    pub error: Error,
}

/// Where to look for skills besides the bundled ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    /// Managed skills, usually `FLYNN_HOME/skills`.
    pub managed: Option<PathBuf>,
    /// Workspace skills, usually `<workspace>/skills`.
    pub workspace: Option<PathBuf>,
}

impl Sources {
    /// `home/skills` and `workspace/skills`.
    pub fn new(home: &Path, workspace: &Path) -> Sources {
        Sources {
            managed: Some(home.join("skills")),
            workspace: Some(workspace.join("skills")),
        }
    }
}

/// Every skill, merged across tiers and gated.
#[derive(Debug)]
pub struct SkillSet {
    skills: BTreeMap<String, Skill>,
    broken: Vec<Broken>,
}

impl SkillSet {
    /// Loads the bundled skills, then `sources.managed`, then
    /// `sources.workspace`, each overriding the one before it by name, and
    /// gates them against `env`. Never fails: a directory that cannot be
    /// read, or a skill that cannot be loaded, is listed in
    /// [`SkillSet::broken`] and the others load. A broken skill overrides
    /// nothing. A tier's directory that does not exist has no skills.
    pub fn load(sources: &Sources, env: &dyn Environment) -> SkillSet {
        let mut set = SkillSet {
            skills: BTreeMap::new(),
            broken: Vec::new(),
        };
        for bundled in crate::bundled::BUNDLED {
            let path = Path::new("bundled").join(bundled.name).join(MANIFEST_FILE);
            match Manifest::parse(bundled.manifest, &path) {
                Ok(manifest) => set.add(Skill {
                    name: manifest.name.clone(),
                    tier: Tier::Bundled,
                    dir: None,
                    availability: gate(&manifest, env),
                    manifest,
                    overrides: None,
                    body: Body::Bundled(bundled.body),
                }),
                Err(error) => set.broken.push(Broken {
                    name: bundled.name.to_owned(),
                    tier: Tier::Bundled,
                    dir: None,
                    error,
                }),
            }
        }
        let tiers = [
            (Tier::Managed, &sources.managed),
            (Tier::Workspace, &sources.workspace),
        ];
        for (tier, root) in tiers {
            if let Some(root) = root {
                set.load_tier(tier, root, env);
            }
        }
        set
    }

    fn load_tier(&mut self, tier: Tier, root: &Path, env: &dyn Environment) {
        let entries = match std::fs::read_dir(root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.broken.push(Broken {
                    name: String::new(),
                    tier,
                    dir: Some(root.to_path_buf()),
                    error: Error::io(root)(e),
                });
                return;
            }
        };
        let mut dirs = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    // Hidden entries include installs in progress.
                    if !name.starts_with('.') && entry.path().is_dir() {
                        dirs.push((name, entry.path()));
                    }
                }
                Err(e) => self.broken.push(Broken {
                    name: String::new(),
                    tier,
                    dir: Some(root.to_path_buf()),
                    error: Error::io(root)(e),
                }),
            }
        }
        dirs.sort();
        for (name, dir) in dirs {
            match load_dir(&dir, Some(&name)) {
                Ok(manifest) => self.add(Skill {
                    name: manifest.name.clone(),
                    tier,
                    availability: gate(&manifest, env),
                    manifest,
                    overrides: None,
                    body: Body::File(dir.join(SKILL_FILE)),
                    dir: Some(dir),
                }),
                Err(error) => self.broken.push(Broken {
                    name,
                    tier,
                    dir: Some(dir),
                    error,
                }),
            }
        }
    }

    fn add(&mut self, mut skill: Skill) {
        if let Some(previous) = self.skills.get(&skill.name) {
            skill.overrides = Some(previous.tier);
        }
        self.skills.insert(skill.name.clone(), skill);
    }

    /// Every loaded skill, available or not, by name.
    pub fn skills(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// The available skills, by name.
    pub fn available(&self) -> impl Iterator<Item = &Skill> {
        self.skills().filter(|s| s.is_available())
    }

    /// The skill named `name`, available or not.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// What could not be loaded, in the order it was found.
    pub fn broken(&self) -> &[Broken] {
        &self.broken
    }

    /// The instructions of an available skill: what [`READ_TOOL`] returns.
    pub fn instructions(&self, name: &str) -> Result<Cow<'static, str>> {
        let skill = self.get(name).ok_or_else(|| Error::UnknownSkill {
            name: name.to_owned(),
        })?;
        match &skill.availability {
            Availability::Available => skill.body(),
            Availability::Unavailable { reasons } => Err(Error::Unavailable {
                name: name.to_owned(),
                reasons: reasons.clone(),
            }),
        }
    }

    /// The index for the system prompt: one line naming the available
    /// skills and how to use one. Their descriptions stay out of every
    /// request: `skills.read` gives a skill's instructions, and lists the
    /// skills with their descriptions ([`SkillSet::catalog`]) when asked
    /// for a name it does not know. Empty when no skill is available.
    pub fn index(&self) -> String {
        let names: Vec<&str> = self.available().map(|s| s.name.as_str()).collect();
        if names.is_empty() {
            return String::new();
        }
        format!(
            "Skills: {}. Before a task one of them fits, call `{READ_TOOL}` with its name and follow what it returns.",
            names.join(", ")
        )
    }

    /// The available skills with their descriptions, one line each.
    pub fn catalog(&self) -> String {
        self.available()
            .map(|s| format!("- {} — {}", s.name, s.manifest.description.trim()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Whether a skill with this manifest can run in `env`.
pub fn gate(manifest: &Manifest, env: &dyn Environment) -> Availability {
    let reasons = unmet(&manifest.requires, env);
    if reasons.is_empty() {
        Availability::Available
    } else {
        Availability::Unavailable { reasons }
    }
}

/// Reads and validates the skill in `dir`: its manifest parses, its name
/// is `expected_name` (the directory's, when it is in a tier), and it has
/// its instructions.
pub(crate) fn load_dir(dir: &Path, expected_name: Option<&str>) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::MissingFile {
                path,
                file: MANIFEST_FILE,
                what: "its name, description, requirements and permissions",
            });
        }
        Err(e) => return Err(Error::io(path)(e)),
    };
    let manifest = Manifest::parse(&text, &path)?;
    if let Some(expected) = expected_name
        && manifest.name != expected
    {
        return Err(Error::manifest(
            path,
            "name",
            format!(
                "'{}' is not the name of its directory '{expected}'; expected the two to be the same",
                manifest.name
            ),
        ));
    }
    let body = dir.join(SKILL_FILE);
    if !body.is_file() {
        return Err(Error::MissingFile {
            path: body,
            file: SKILL_FILE,
            what: "the instructions the model reads",
        });
    }
    Ok(manifest)
}
