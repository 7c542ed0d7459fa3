//! Skills loaded from real directories, gated against fixed environments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod gating;
mod install;
mod loading;
mod permissions;

use std::path::{Path, PathBuf};

use flynn_skills::{FixedEnvironment, SkillSet, Sources};

/// Writes `root/<dir>/manifest.json` and `SKILL.md`.
pub fn write_skill(root: &Path, dir: &str, manifest: &str, body: Option<&str>) -> PathBuf {
    let dir = root.join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.json"), manifest).unwrap();
    if let Some(body) = body {
        std::fs::write(dir.join("SKILL.md"), body).unwrap();
    }
    dir
}

/// A minimal valid manifest.
pub fn manifest(name: &str, description: &str) -> String {
    format!(r#"{{"name": "{name}", "description": "{description}"}}"#)
}

/// Linux with every program the bundled skills need.
pub fn linux() -> FixedEnvironment {
    FixedEnvironment::new("linux").with_bins(["git", "uname", "df"])
}

/// A temp dir with `home/skills` and `ws/skills` as the sources.
pub struct Dirs {
    pub tmp: tempfile::TempDir,
    pub sources: Sources,
}

impl Default for Dirs {
    fn default() -> Dirs {
        Dirs::new()
    }
}

impl Dirs {
    pub fn new() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let sources = Sources::new(&tmp.path().join("home"), &tmp.path().join("ws"));
        Dirs { tmp, sources }
    }

    pub fn managed(&self) -> &Path {
        self.sources.managed.as_deref().unwrap()
    }

    pub fn workspace(&self) -> &Path {
        self.sources.workspace.as_deref().unwrap()
    }

    pub fn load(&self, env: &FixedEnvironment) -> SkillSet {
        SkillSet::load(&self.sources, env)
    }
}
