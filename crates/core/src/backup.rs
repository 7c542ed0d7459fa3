//! Backing up a Flynn home into one archive, and restoring it.
//!
//! `flynn backup <file>` writes a gzipped tar (created 0600: it holds
//! every conversation and the gateway's secrets) with:
//!
//! - `sessions.db`: a consistent copy of the session database, taken with
//!   SQLite's `VACUUM INTO` while the daemon may be writing (see
//!   [`flynn_sessions::SqliteStore::snapshot`]);
//! - `memory/`: the memory files (`memory.dir`); the search index is
//!   derived from them and rebuilt, so it is left out;
//! - `config.yaml`: the config file, when there is one;
//! - `home/gateway.token`, `home/tokens/`, `home/skills/`: the gateway's
//!   tokens and the installed skills, with their modes (secrets stay 0600).
//!
//! The workspace, the audit log and logs are not part of it.
//!
//! `flynn restore <file>` refuses while a daemon holds the home
//! ([`DaemonLock`]), unpacks into a private staging directory, checks the
//! database (`PRAGMA quick_check`), moves what it replaces into
//! `FLYNN_HOME/before-restore-<millis>/` and only then moves the restored
//! files in.

use std::fs::File;
use std::path::{Path, PathBuf};

use flynn_protocol::config::FlynnConfig;
use flynn_sessions::{SqliteStore, StoreLocation};

use crate::{Error, Result};

/// The name of the lock file a daemon holds in its home for as long as it
/// runs.
pub const DAEMON_LOCK: &str = "daemon.lock";

/// The files of a home a backup holds, besides the database and memory.
const HOME_ENTRIES: [&str; 3] = ["gateway.token", "tokens", "skills"];

/// What a backup or restore covers, resolved from the config.
#[derive(Debug, Clone)]
pub struct Layout {
    pub home: PathBuf,
    pub database: PathBuf,
    pub memory_dir: PathBuf,
    pub memory_index: PathBuf,
    pub config_file: Option<PathBuf>,
}

impl Layout {
    /// Where `config` keeps things under `home`; `config_file` is the file
    /// the config was read from (backed up when it exists).
    pub fn resolve(config: &FlynnConfig, home: &Path, config_file: Option<&Path>) -> Result<Self> {
        let database = match flynn_sessions::location(&config.sessions, home)? {
            StoreLocation::Sqlite(database) => database,
            postgres @ StoreLocation::Postgres(_) => {
                return Err(Error::Backup(format!(
                    "the sessions are in PostgreSQL ({}): back them up with the server's own tools (`pg_dump`); `flynn backup` copies a SQLite session store, the memory and the config",
                    postgres.redacted()
                )));
            }
        };
        Ok(Layout {
            home: home.to_path_buf(),
            database,
            memory_dir: config
                .memory
                .dir
                .clone()
                .unwrap_or_else(|| home.join("memory")),
            memory_index: config
                .memory
                .index
                .clone()
                .unwrap_or_else(|| home.join("memory-index.db")),
            config_file: config_file.map(Path::to_path_buf),
        })
    }
}

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    pub archive: PathBuf,
    /// The archive's entries that are files, in order.
    pub files: Vec<String>,
}

/// What a restore replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Where the files the restore replaced were moved.
    pub aside: PathBuf,
    /// The archive's entries that are files, in order.
    pub files: Vec<String>,
}

/// The lock a running daemon holds on its home (`FLYNN_HOME/daemon.lock`,
/// an advisory lock the OS drops when the process ends, however it ends).
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
}

impl DaemonLock {
    /// Takes the lock on `home`; `Ok(None)` when another process holds it.
    pub fn try_acquire(home: &Path) -> Result<Option<Self>> {
        let path = home.join(DAEMON_LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::Backup(format!("cannot open {}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(DaemonLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::Backup(format!(
                "cannot lock {}: {e}",
                path.display()
            ))),
        }
    }
}

/// Writes the archive `to` (which must not exist) from `layout`.
pub async fn backup(layout: &Layout, to: &Path) -> Result<BackupReport> {
    if to.exists() {
        return Err(Error::Backup(format!(
            "{} exists already; name a new file (a backup never overwrites one)",
            to.display()
        )));
    }
    let staging = tempfile::Builder::new()
        .prefix(".backup-")
        .tempdir_in(
            to.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
        )
        .map_err(|e| {
            Error::Backup(format!(
                "cannot make a scratch directory beside {}: {e}",
                to.display()
            ))
        })?;
    let copy = staging.path().join("sessions.db");
    let store = SqliteStore::open(&layout.database).await?;
    let taken = store.snapshot(&copy).await;
    store.close().await;
    taken?;
    let layout = layout.clone();
    let to = to.to_path_buf();
    tokio::task::spawn_blocking(move || write_archive(&layout, &copy, &to))
        .await
        .map_err(|e| Error::Backup(format!("the backup stopped: {e}")))?
}

fn write_archive(layout: &Layout, copy: &Path, to: &Path) -> Result<BackupReport> {
    let io = |what: &str, e: std::io::Error| Error::Backup(format!("{what}: {e}"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options
        .open(to)
        .map_err(|e| io(&format!("cannot create {}", to.display()), e))?;
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::default(),
    ));
    tar.follow_symlinks(false);
    let mut files = Vec::new();
    let mut add = |tar: &mut tar::Builder<_>, source: &Path, name: &str| -> Result<()> {
        if source.is_dir() {
            tar.append_dir_all(name, source)
                .map_err(|e| io(&format!("cannot add {}", source.display()), e))?;
            for entry in walk(source)? {
                let relative = entry.strip_prefix(source).unwrap_or(&entry);
                files.push(format!("{name}/{}", relative.display()));
            }
        } else if source.is_file() {
            tar.append_path_with_name(source, name)
                .map_err(|e| io(&format!("cannot add {}", source.display()), e))?;
            files.push(name.to_owned());
        }
        Ok(())
    };
    add(&mut tar, copy, "sessions.db")?;
    add(&mut tar, &layout.memory_dir, "memory")?;
    if let Some(config) = &layout.config_file {
        add(&mut tar, config, "config.yaml")?;
    }
    for entry in HOME_ENTRIES {
        add(&mut tar, &layout.home.join(entry), &format!("home/{entry}"))?;
    }
    let gz = tar
        .into_inner()
        .map_err(|e| io(&format!("cannot write {}", to.display()), e))?;
    let file = gz
        .finish()
        .map_err(|e| io(&format!("cannot write {}", to.display()), e))?;
    file.sync_all()
        .map_err(|e| io(&format!("cannot write {}", to.display()), e))?;
    Ok(BackupReport {
        archive: to.to_path_buf(),
        files,
    })
}

/// Every file under `dir`, sorted.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        let entries = std::fs::read_dir(&next)
            .map_err(|e| Error::Backup(format!("cannot read {}: {e}", next.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => todo.push(path),
                Ok(kind) if kind.is_file() => out.push(path),
                _ => {}
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Restores the archive `from` over `layout`.
pub async fn restore(layout: &Layout, from: &Path) -> Result<RestoreReport> {
    if !from.is_file() {
        return Err(Error::Backup(format!(
            "{} is not a file: name an archive `flynn backup` wrote",
            from.display()
        )));
    }
    // A new machine may have no home yet.
    flynn_config::create_home(&layout.home).map_err(|e| {
        Error::Backup(format!(
            "cannot create FLYNN_HOME {}: {e}",
            layout.home.display()
        ))
    })?;
    let Some(_lock) = DaemonLock::try_acquire(&layout.home)? else {
        return Err(Error::Backup(format!(
            "a daemon is running on {}: stop it first (`systemctl --user stop flynn`, or Ctrl-C on `flynn start`), then restore",
            layout.home.display()
        )));
    };
    let staging = tempfile::Builder::new()
        .prefix(".restore-")
        .tempdir_in(&layout.home)
        .map_err(|e| {
            Error::Backup(format!(
                "cannot make a scratch directory in {}: {e}",
                layout.home.display()
            ))
        })?;
    let unpack_to = staging.path().to_path_buf();
    let archive = from.to_path_buf();
    let files = tokio::task::spawn_blocking(move || unpack(&archive, &unpack_to))
        .await
        .map_err(|e| Error::Backup(format!("the restore stopped: {e}")))??;
    let database = staging.path().join("sessions.db");
    if !database.is_file() {
        return Err(Error::Backup(format!(
            "{} holds no sessions.db: is it a `flynn backup` archive?",
            from.display()
        )));
    }
    let store = SqliteStore::open(&database).await?;
    let problems = store.quick_check().await;
    store.close().await;
    let problems = problems?;
    if !problems.is_empty() {
        return Err(Error::Backup(format!(
            "the database in {} is damaged ({}); nothing was changed",
            from.display(),
            problems.join("; ")
        )));
    }
    let aside = layout.home.join(format!(
        "before-restore-{}",
        flynn_protocol::clock::now_millis()
    ));
    std::fs::create_dir(&aside)
        .map_err(|e| Error::Backup(format!("cannot create {}: {e}", aside.display())))?;
    let mut moves: Vec<(PathBuf, PathBuf, &str)> = vec![
        (database, layout.database.clone(), "sessions.db"),
        (
            staging.path().join("memory"),
            layout.memory_dir.clone(),
            "memory",
        ),
    ];
    if let Some(config) = &layout.config_file {
        moves.push((
            staging.path().join("config.yaml"),
            config.clone(),
            "config.yaml",
        ));
    }
    for entry in HOME_ENTRIES {
        moves.push((
            staging.path().join("home").join(entry),
            layout.home.join(entry),
            entry,
        ));
    }
    // The old database with its WAL and its outbox marks, and the index
    // of the old memory.
    let mut old: Vec<(PathBuf, String)> = Vec::new();
    for suffix in ["", "-wal", "-shm", "-delivered"] {
        let mut name = layout.database.as_os_str().to_owned();
        name.push(suffix);
        old.push((PathBuf::from(name), format!("sessions.db{suffix}")));
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = layout.memory_index.as_os_str().to_owned();
        name.push(suffix);
        old.push((PathBuf::from(name), format!("memory-index.db{suffix}")));
    }
    for (source, target, name) in &moves {
        if source.exists() && !name.starts_with("sessions.db") {
            old.push((target.clone(), (*name).to_owned()));
        }
    }
    for (path, name) in &old {
        if std::fs::symlink_metadata(path).is_ok() {
            move_path(path, &aside.join(name))?;
        }
    }
    for (source, target, _) in &moves {
        if source.exists() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    Error::Backup(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            move_path(source, target)?;
        }
    }
    Ok(RestoreReport { aside, files })
}

fn unpack(archive: &Path, into: &Path) -> Result<Vec<String>> {
    let file = File::open(archive)
        .map_err(|e| Error::Backup(format!("cannot open {}: {e}", archive.display())))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    tar.set_preserve_permissions(true);
    let mut files = Vec::new();
    let entries = tar
        .entries()
        .map_err(|e| Error::Backup(format!("cannot read {}: {e}", archive.display())))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| Error::Backup(format!("cannot read {}: {e}", archive.display())))?;
        let path = entry
            .path()
            .map_err(|e| Error::Backup(format!("cannot read {}: {e}", archive.display())))?
            .into_owned();
        let is_file = entry.header().entry_type().is_file();
        // `unpack_in` refuses paths that would leave `into`.
        let inside = entry
            .unpack_in(into)
            .map_err(|e| Error::Backup(format!("cannot unpack {}: {e}", path.display())))?;
        if !inside {
            return Err(Error::Backup(format!(
                "{} has an entry outside the archive's root ({}): not a `flynn backup` archive",
                archive.display(),
                path.display()
            )));
        }
        if is_file {
            files.push(path.display().to_string());
        }
    }
    Ok(files)
}

/// Renames `from` to `to`, copying across file systems.
fn move_path(from: &Path, to: &Path) -> Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices && from.is_file() => {
            std::fs::copy(from, to)
                .and_then(|_| std::fs::remove_file(from))
                .map_err(|e| {
                    Error::Backup(format!(
                        "cannot move {} to {}: {e}",
                        from.display(),
                        to.display()
                    ))
                })
        }
        Err(e) => Err(Error::Backup(format!(
            "cannot move {} to {}: {e}",
            from.display(),
            to.display()
        ))),
    }
}
