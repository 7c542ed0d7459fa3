//! `flynn skills install|remove`: copying skills into the managed tier and
//! deleting them from it. Nothing here runs a program: a manifest's
//! `install` step is returned for the caller to confirm with a person.

use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::manifest::{InstallStep, Manifest, name_problem};
use crate::set::{MANIFEST_FILE, Sources, Tier, load_dir};

/// The most an archive may unpack to.
pub const MAX_ARCHIVE_BYTES: u64 = 32 * 1024 * 1024;
/// The most entries an archive may hold.
pub const MAX_ARCHIVE_ENTRIES: usize = 2_000;

/// How to install.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstallOptions {
    /// Replace a managed skill of the same name.
    pub force: bool,
}

/// A skill now in the managed tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Whether a managed skill of the same name was replaced.
    pub replaced: bool,
    /// The manifest's setup step: not run; ask a person before running it.
    pub setup: Option<InstallStep>,
}

/// Installs the skill in `from` (a directory, or a `.tar.gz`/`.tgz`
/// archive holding `manifest.json` at its top or in its one top-level
/// directory) into `managed/<name>`. The manifest is validated before
/// anything is put in place; an existing skill is replaced only with
/// `force`; archive entries that are not plain files or directories, or
/// whose paths leave the skill's directory, refuse the whole install, as do
/// symbolic links in a directory.
///
/// Directories are made private to the user (0700): the managed tier
/// lives in `FLYNN_HOME`.
pub fn install(from: &Path, managed: &Path, options: InstallOptions) -> Result<Installed> {
    create_private_dirs(managed).map_err(Error::io(managed))?;
    let staging = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(managed)
        .map_err(Error::io(managed))?;
    let unpacked = staging.path().join("skill");
    let name = from
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if from.is_dir() {
        copy_dir(from, from, &unpacked)?;
    } else if from.is_file() && (name.ends_with(".tar.gz") || name.ends_with(".tgz")) {
        unpack(from, &unpacked)?;
    } else {
        return Err(Error::UnsupportedSource {
            path: from.to_path_buf(),
        });
    }
    let root = skill_root(&unpacked)?;
    let manifest = load_dir(&root, None)?;
    let target = managed.join(&manifest.name);
    let replaced = target.exists();
    if replaced {
        if !options.force {
            return Err(Error::AlreadyInstalled {
                name: manifest.name,
                path: target,
            });
        }
        std::fs::remove_dir_all(&target).map_err(Error::io(&target))?;
    }
    std::fs::rename(&root, &target).map_err(Error::io(&target))?;
    Ok(Installed {
        name: manifest.name.clone(),
        dir: target,
        setup: manifest.install.clone(),
        manifest,
        replaced,
    })
}

/// Deletes the managed skill `name`. Refuses bundled skills, and workspace
/// skills (the user's own files) when no managed skill has the name.
/// Returns the directory deleted.
pub fn remove(name: &str, sources: &Sources) -> Result<PathBuf> {
    if name_problem(name).is_some() {
        return Err(Error::UnknownSkill {
            name: name.to_owned(),
        });
    }
    if let Some(managed) = &sources.managed {
        let dir = managed.join(name);
        if dir.is_dir() {
            std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
            return Ok(dir);
        }
    }
    if let Some(workspace) = &sources.workspace {
        let dir = workspace.join(name);
        if dir.is_dir() {
            return Err(Error::NotRemovable {
                name: name.to_owned(),
                tier: Tier::Workspace,
                path: Some(dir),
            });
        }
    }
    if crate::bundled::BUNDLED.iter().any(|b| b.name == name) {
        return Err(Error::NotRemovable {
            name: name.to_owned(),
            tier: Tier::Bundled,
            path: None,
        });
    }
    Err(Error::UnknownSkill {
        name: name.to_owned(),
    })
}

/// The directory holding `manifest.json`: `dir` itself, or its only
/// subdirectory.
fn skill_root(dir: &Path) -> Result<PathBuf> {
    if dir.join(MANIFEST_FILE).exists() {
        return Ok(dir.to_path_buf());
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    if let [only] = entries.as_slice()
        && only.is_dir()
        && only.join(MANIFEST_FILE).exists()
    {
        return Ok(only.clone());
    }
    Err(Error::MissingFile {
        path: dir.join(MANIFEST_FILE),
        file: MANIFEST_FILE,
        what: "at its top or in its one top-level directory",
    })
}

fn copy_dir(from: &Path, dir: &Path, to: &Path) -> Result<()> {
    create_private_dirs(to).map_err(Error::io(to))?;
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(Error::io(&path))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(from, &path, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&path, &target).map_err(Error::io(&path))?;
        } else {
            return Err(Error::Unsafe {
                from: from.to_path_buf(),
                entry: path.strip_prefix(from).unwrap_or(&path).display().to_string(),
                problem: "is a symbolic link or special file; a skill may hold only files and directories".into(),
            });
        }
    }
    Ok(())
}

pub(crate) fn unpack(archive: &Path, to: &Path) -> Result<()> {
    let file = File::open(archive).map_err(Error::io(archive))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let io = |e| Error::io(archive)(e);
    let unsafe_entry = |entry: String, problem: &str| Error::Unsafe {
        from: archive.to_path_buf(),
        entry,
        problem: problem.to_owned(),
    };
    create_private_dirs(to).map_err(Error::io(to))?;
    let mut total = 0u64;
    for (count, entry) in tar.entries().map_err(io)?.enumerate() {
        let mut entry = entry.map_err(io)?;
        if count >= MAX_ARCHIVE_ENTRIES {
            return Err(unsafe_entry(
                format!("entry {}", count + 1),
                &format!("the archive has more than {MAX_ARCHIVE_ENTRIES} entries"),
            ));
        }
        let raw = entry.path_bytes();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            continue;
        }
        let path = entry.path().map_err(io)?.into_owned();
        let mut relative = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => relative.push(part),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(unsafe_entry(
                        shown,
                        "leads outside the skill's directory ('..' or an absolute path)",
                    ));
                }
            }
        }
        if relative.as_os_str().is_empty() {
            continue;
        }
        let target = to.join(&relative);
        match kind {
            tar::EntryType::Directory => {
                create_private_dirs(&target).map_err(Error::io(&target))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                total = total.saturating_add(entry.size());
                if total > MAX_ARCHIVE_BYTES {
                    return Err(unsafe_entry(
                        shown,
                        &format!("the archive unpacks to more than {MAX_ARCHIVE_BYTES} bytes"),
                    ));
                }
                if let Some(parent) = target.parent() {
                    create_private_dirs(parent).map_err(Error::io(parent))?;
                }
                let executable = entry.header().mode().is_ok_and(|m| m & 0o111 != 0);
                let mut out = File::create(&target).map_err(Error::io(&target))?;
                std::io::copy(&mut (&mut entry).take(MAX_ARCHIVE_BYTES), &mut out)
                    .map_err(Error::io(&target))?;
                set_executable(&target, executable)?;
            }
            _ => {
                return Err(unsafe_entry(
                    shown,
                    "is a link or special file; a skill may hold only files and directories",
                ));
            }
        }
    }
    Ok(())
}

/// Creates `dir` and its missing parents 0700.
fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(unix)]
fn set_executable(path: &Path, executable: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(Error::io(path))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path, _executable: bool) -> Result<()> {
    Ok(())
}
