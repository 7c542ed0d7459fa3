//! `sessions.retention_days`: deleting what has been idle too long.

use std::path::Path;
use std::time::{Duration, SystemTime};

use flynn_protocol::SessionKey;
use flynn_sessions::Conversations;

use crate::Result;

/// How often the daemon prunes, after once at start-up.
pub const PRUNE_EVERY: Duration = Duration::from_secs(24 * 60 * 60);

/// What one pruning removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub sessions: Vec<SessionKey>,
    /// Chat attachments removed from `<workspace>/inbox`.
    pub inbox_files: usize,
}

/// Deletes the sessions last active more than `days` days before `now`
/// (with their messages, turns and kept tool outputs; sessions with a
/// turn pending or running stay), and the chat attachments in
/// `<workspace>/inbox` last modified before then.
pub async fn prune(
    store: &dyn Conversations,
    workspace: &Path,
    days: u64,
    now: SystemTime,
) -> Result<Pruned> {
    let age = Duration::from_secs(days.saturating_mul(24 * 60 * 60));
    let cutoff = now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
    let millis = cutoff
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let sessions = store.prune_idle(millis).await?;
    let inbox = workspace.join("inbox");
    let inbox_files = tokio::task::spawn_blocking(move || prune_files(&inbox, cutoff))
        .await
        .unwrap_or(0);
    Ok(Pruned {
        sessions,
        inbox_files,
    })
}

/// Removes the files under `dir` (one level of channel directories)
/// modified before `cutoff`; returns how many. Links are not followed.
fn prune_files(dir: &Path, cutoff: SystemTime) -> usize {
    let Ok(channels) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for channel in channels.flatten() {
        if !channel.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(channel.path()) else {
            continue;
        };
        for file in files.flatten() {
            let old = file.metadata().is_ok_and(|meta| {
                meta.is_file() && meta.modified().is_ok_and(|modified| modified < cutoff)
            });
            if old {
                match std::fs::remove_file(file.path()) {
                    Ok(()) => removed += 1,
                    Err(error) => {
                        tracing::warn!(file = %file.path().display(), %error, "cannot remove an old chat attachment")
                    }
                }
            }
        }
    }
    removed
}
