//! `file.*`: reading, writing, editing, listing and searching files, all
//! confined to the workspace ([`ToolContext::confine`](crate::ToolContext::confine)).

mod edit;
mod list;
mod read;
mod search;
mod walk;
mod write;

pub use edit::FileEdit;
pub use list::FileList;
pub use read::FileRead;
pub use search::FileSearch;
pub use write::FileWrite;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::ToolError;

/// Bytes looked at to tell a binary file from text.
const SNIFF: usize = 8192;

/// Whether the start of a file looks binary (has a NUL byte).
fn is_binary(start: &[u8]) -> bool {
    start[..start.len().min(SNIFF)].contains(&0)
}

/// Writes `content` to `path` atomically: a temporary file in the same
/// directory, renamed over the target, keeping an existing file's
/// permissions. Creates missing parent directories.
///
/// The temporary file has a random name and is created exclusively
/// without following symbolic links, so a link planted where it will be
/// (by a sandboxed command, say) makes the create fail instead of sending
/// the write elsewhere; its mode is set through the open file. The rename
/// replaces whatever entry `path` names (a symbolic link included) and
/// never writes through it.
async fn write_atomically(path: &Path, content: &[u8]) -> Result<(), ToolError> {
    let target = path.to_path_buf();
    let content = content.to_vec();
    tokio::task::spawn_blocking(move || replace_file(&target, &content))
        .await
        .map_err(|e| ToolError::failed(format!("writing {} failed: {e}", path.display())))?
}

/// Tries at creating a temporary file before giving up: a name is taken
/// only when something else created it first.
const TEMP_TRIES: usize = 8;

fn replace_file(path: &Path, content: &[u8]) -> Result<(), ToolError> {
    let fail = |what: &str, e: std::io::Error| {
        ToolError::failed(format!("cannot {what} {}: {e}", path.display()))
    };
    let parent = path
        .parent()
        .ok_or_else(|| ToolError::failed(format!("{} has no parent directory", path.display())))?;
    std::fs::create_dir_all(parent).map_err(|e| fail("create the directory of", e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The permissions of the file being replaced, not of whatever a
    // symbolic link there points at.
    let permissions = std::fs::symlink_metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.permissions());
    let (temp, mut file) = create_temp(parent, &name, permissions.as_ref())
        .map_err(|e| fail("create a temporary file to replace", e))?;
    let written = file.write_all(content).map_err(|e| fail("write", e));
    let kept = match &permissions {
        Some(permissions) => file
            .set_permissions(permissions.clone())
            .map_err(|e| fail("keep the permissions of", e)),
        None => Ok(()),
    };
    drop(file);
    if let Err(error) = written.and(kept) {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    if let Err(e) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(fail("replace", e));
    }
    Ok(())
}

/// Creates `.<name>.flynn-<random>.tmp` in `dir`: exclusively, never
/// through a symbolic link, with at most the mode it will end with.
fn create_temp(
    dir: &Path,
    name: &str,
    permissions: Option<&std::fs::Permissions>,
) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.custom_flags(nofollow());
        options.mode(permissions.map_or(0o666, |p| p.mode() & 0o777));
    }
    #[cfg(not(unix))]
    let _ = permissions;
    let mut last = None;
    for _ in 0..TEMP_TRIES {
        let random = getrandom::u64().map_err(|e| std::io::Error::other(e.to_string()))?;
        let temp = dir.join(format!(".{name}.flynn-{random:016x}.tmp"));
        match options.open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// `O_NOFOLLOW`, for `OpenOptionsExt::custom_flags`.
#[cfg(unix)]
fn nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Opens a file to read it, refusing anything but a regular file with an
/// error naming what it is: the open does not wait for a named pipe's
/// writer (`O_NONBLOCK`) and does not follow a symbolic link put in the
/// path's place (`O_NOFOLLOW`; `path` comes resolved from `confine`), and
/// the file type is checked on the open file, so nothing swapped in
/// between a check and the open can block a read.
pub(crate) fn open_regular(path: &Path, shown: &str) -> Result<std::fs::File, ToolError> {
    let refuse = |kind: &str| ToolError::failed(format!("{shown} is {kind}, not a regular file"));
    #[cfg(unix)]
    let opened = {
        use rustix::fs::{Mode, OFlags};
        rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(std::fs::File::from)
        .map_err(std::io::Error::from)
    };
    #[cfg(not(unix))]
    let opened = std::fs::File::open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) => {
            // A socket cannot be opened at all; say what it is.
            if let Some(kind) = std::fs::symlink_metadata(path)
                .ok()
                .and_then(|m| not_regular(&m.file_type()))
            {
                return Err(refuse(kind));
            }
            return Err(ToolError::failed(format!("cannot open {shown}: {e}")));
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| ToolError::failed(format!("cannot read {shown}: {e}")))?;
    if let Some(kind) = not_regular(&meta.file_type()) {
        return Err(refuse(kind));
    }
    // Reads of a regular file never wait, but blocking mode is what the
    // readers expect.
    #[cfg(unix)]
    if let Ok(flags) = rustix::fs::fcntl_getfl(&file) {
        let _ = rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK);
    }
    Ok(file)
}

/// What a file that is not a regular file is ("a named pipe"), or `None`
/// for a regular file.
fn not_regular(kind: &std::fs::FileType) -> Option<&'static str> {
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    if kind.is_symlink() {
        return Some("a symbolic link");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("a named pipe");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
        if kind.is_char_device() || kind.is_block_device() {
            return Some("a device");
        }
    }
    Some("a special file")
}
