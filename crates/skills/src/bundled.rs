//! The skills compiled into Flynn (`crates/skills/bundled/<name>`).

/// One bundled skill's files.
pub(crate) struct Bundled {
    pub name: &'static str,
    pub manifest: &'static str,
    pub body: &'static str,
}

macro_rules! bundled {
    ($($name:literal),* $(,)?) => {
        &[$(Bundled {
            name: $name,
            manifest: include_str!(concat!("../bundled/", $name, "/manifest.json")),
            body: include_str!(concat!("../bundled/", $name, "/SKILL.md")),
        }),*]
    };
}

pub(crate) static BUNDLED: &[Bundled] = bundled!["git", "system-info", "web-search"];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Manifest;

    #[test]
    fn every_bundled_skill_is_valid_and_named_after_its_directory() {
        for bundled in super::BUNDLED {
            let manifest = Manifest::parse(bundled.manifest, Path::new(bundled.name)).unwrap();
            assert_eq!(manifest.name, bundled.name);
            assert!(!bundled.body.trim().is_empty());
        }
    }
}
