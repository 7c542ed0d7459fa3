//! Files from a chat, saved in the workspace's inbox.

use std::path::{Path, PathBuf};

use flynn_protocol::clock::now_millis;

/// A file name from a chat, safe to write: no directories, no dot files,
/// at most 100 bytes.
pub(crate) fn safe_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let mut clean: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    while clean.starts_with('.') {
        clean.remove(0);
    }
    let cut = clean.floor_char_boundary(clean.len().min(100));
    clean.truncate(cut);
    if clean.is_empty() {
        "file".to_owned()
    } else {
        clean
    }
}

/// Names tried for one file before giving up (`<millis>-<name>`, then
/// `<millis>-<n>-<name>`).
pub(crate) const SAVE_TRIES: u32 = 16;

/// Saves `data` as `inbox/<channel>/<millis>-<name>` in `workspace` and
/// returns that relative path. Private to the daemon's user: directories
/// it creates are 0700, the file 0600. Refuses a symbolic link (or
/// anything but a directory) at `inbox` or `inbox/<channel>`: each
/// directory is opened without following links and the next one is
/// created and opened inside it, and the file is created exclusively
/// there, so a link planted in the workspace (by a sandboxed command, say)
/// cannot send a chat's file elsewhere.
pub(crate) fn save_in_inbox(
    workspace: &Path,
    channel: &str,
    name: &str,
    data: &[u8],
) -> std::io::Result<PathBuf> {
    let mut relative = PathBuf::from("inbox");
    for part in channel.split(['/', '\\']) {
        if !part.is_empty() && part != "." && part != ".." {
            relative.push(part);
        }
    }
    let dirs: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let millis = now_millis();
    let mut last = None;
    for n in 0..SAVE_TRIES {
        let file = if n == 0 {
            format!("{millis}-{name}")
        } else {
            format!("{millis}-{n}-{name}")
        };
        match create_private_file(workspace, &dirs, &file, data) {
            Ok(()) => return Ok(relative.join(file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free file name in the inbox")))
}

/// The error for `dirs[..=at]`, which is not a real directory.
pub(crate) fn not_a_directory(dirs: &[String], at: usize, what: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "{} is {what}, not a directory; chat files are saved only into real directories in the workspace (remove it, and Flynn creates the directory)",
        dirs[..=at].join("/")
    ))
}

#[cfg(unix)]
pub(crate) fn create_private_file(
    workspace: &Path,
    dirs: &[String],
    file: &str,
    data: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;

    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    let mut dir = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for (at, part) in dirs.iter().enumerate() {
        match rustix::fs::mkdirat(&dir, part.as_str(), Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        dir = match rustix::fs::openat(
            &dir,
            part.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(next) => next,
            Err(Errno::LOOP) => return Err(not_a_directory(dirs, at, "a symbolic link")),
            Err(Errno::NOTDIR) => {
                let what = match rustix::fs::statat(
                    &dir,
                    part.as_str(),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                ) {
                    Ok(stat)
                        if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                            == rustix::fs::FileType::Symlink =>
                    {
                        "a symbolic link"
                    }
                    _ => "a file",
                };
                return Err(not_a_directory(dirs, at, what));
            }
            Err(e) => return Err(e.into()),
        };
    }
    let fd = rustix::fs::openat(
        &dir,
        file,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )?;
    let mut out = std::fs::File::from(fd);
    if let Err(e) = out.write_all(data) {
        drop(out);
        let _ = rustix::fs::unlinkat(&dir, file, rustix::fs::AtFlags::empty());
        return Err(e);
    }
    Ok(())
}

#[cfg(not(unix))]
pub(crate) fn create_private_file(
    workspace: &Path,
    dirs: &[String],
    file: &str,
    data: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    let mut dir = workspace.to_path_buf();
    for (at, part) in dirs.iter().enumerate() {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(not_a_directory(dirs, at, "a symbolic link"));
            }
            Ok(_) => return Err(not_a_directory(dirs, at, "a file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(&dir)?,
            Err(e) => return Err(e),
        }
    }
    let path = dir.join(file);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    if let Err(e) = out.write_all(data) {
        drop(out);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(())
}

/// `bytes` for people: `20 MB`, `1.5 MB`.
pub(crate) fn megabytes(bytes: u64) -> String {
    let mb = bytes as f64 / 1_048_576.0;
    if mb.fract() == 0.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{mb:.1} MB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_from_chats_cannot_leave_the_inbox() {
        assert_eq!(safe_file_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_file_name("..\\..\\boot.ini"), "boot.ini");
        assert_eq!(safe_file_name(".bashrc"), "bashrc");
        assert_eq!(safe_file_name("my report (v2).pdf"), "my_report__v2_.pdf");
        assert_eq!(safe_file_name(""), "file");
        assert_eq!(safe_file_name(&"é".repeat(80)).len(), 100);
    }
}
