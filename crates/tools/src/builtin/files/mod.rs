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

use std::path::Path;

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
async fn write_atomically(path: &Path, content: &[u8]) -> Result<(), ToolError> {
    let fail = |what: &str, e: std::io::Error| {
        ToolError::failed(format!("cannot {what} {}: {e}", path.display()))
    };
    let parent = path
        .parent()
        .ok_or_else(|| ToolError::failed(format!("{} has no parent directory", path.display())))?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(|e| fail("create the directory of", e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = parent.join(format!(".{name}.flynn-{}.tmp", std::process::id()));
    let permissions = tokio::fs::metadata(path)
        .await
        .ok()
        .map(|m| m.permissions());
    tokio::fs::write(&temp, content)
        .await
        .map_err(|e| fail("write", e))?;
    if let Some(permissions) = permissions
        && let Err(e) = tokio::fs::set_permissions(&temp, permissions).await
    {
        let _ = tokio::fs::remove_file(&temp).await;
        return Err(fail("keep the permissions of", e));
    }
    if let Err(e) = tokio::fs::rename(&temp, path).await {
        let _ = tokio::fs::remove_file(&temp).await;
        return Err(fail("replace", e));
    }
    Ok(())
}
