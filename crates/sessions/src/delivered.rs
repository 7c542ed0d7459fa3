//! The outbox's marks, kept beside the database.
//!
//! Marking a chat answer sent must be quick: the gap between the send and
//! the mark is the window in which a crash sends that answer twice. An
//! update of the database waits for its single writer, which a busy
//! daemon keeps busy for tens of milliseconds and more, so the marks are
//! appended to a small file (`<database>-delivered`, one turn id per
//! line) instead, one `write` each, which survives the process being
//! killed the moment it returns. They are folded into the database (and
//! the file emptied) when the outbox is read, at start-up, and before a
//! snapshot. The file is not synced: after a power cut a mark may be
//! missing, and that answer is sent again.

use std::io::Write;
use std::path::{Path, PathBuf};

use flynn_protocol::TurnId;
use tokio::sync::Mutex;

/// The append-only file of delivered turns.
#[derive(Debug)]
pub(crate) struct DeliveredLog {
    path: PathBuf,
    /// Held for a whole append, and for a whole fold so that no mark
    /// lands between reading the file and emptying it.
    file: Mutex<Option<std::fs::File>>,
}

impl DeliveredLog {
    /// The log of the database at `database`.
    pub(crate) fn beside(database: &Path) -> Self {
        let mut name = database.as_os_str().to_owned();
        name.push("-delivered");
        DeliveredLog {
            path: PathBuf::from(name),
            file: Mutex::new(None),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `turn`. A few bytes in one `write(2)` to a file opened for
    /// appending: done when it returns, with no waiting on anyone.
    pub(crate) async fn append(&self, turn: TurnId) -> std::io::Result<()> {
        let mut file = self.file.lock().await;
        if file.is_none() {
            *file = Some(open_for_append(&self.path)?);
        }
        let Some(file) = file.as_mut() else {
            unreachable!("opened above");
        };
        file.write_all(format!("{}\n", turn.0).as_bytes())
    }

    /// Runs `fold` with the turns marked so far (a torn last line, from a
    /// crash in the middle of a write, is left out), then empties the file
    /// if `fold` succeeded. No mark is appended meanwhile.
    pub(crate) async fn fold<F, Fut, E>(&self, fold: F) -> Result<(), E>
    where
        F: FnOnce(Vec<TurnId>) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: From<std::io::Error>,
    {
        let mut file = self.file.lock().await;
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // Only whole lines: a torn one may be a prefix of another id.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        let turns: Vec<TurnId> = whole
            .split('\n')
            .filter_map(|line| line.trim().parse().ok().map(TurnId))
            .collect();
        if !turns.is_empty() {
            fold(turns).await?;
        }
        // Emptied in place (the file stays, with its mode), through the
        // handle appends use, which is then at the start again.
        match file.as_mut() {
            Some(open) => open.set_len(0)?,
            None => open_for_append(&self.path)?.set_len(0)?,
        }
        Ok(())
    }
}

/// Opens (creating, 0600) the log for appending.
fn open_for_append(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn marks_are_read_back_once_and_a_torn_line_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let log = DeliveredLog::beside(&dir.path().join("sessions.db"));
        assert!(log.path().ends_with("sessions.db-delivered"));
        // Nothing marked yet: nothing to fold.
        let mut seen = Vec::new();
        log.fold(|turns| async {
            seen.extend(turns);
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
        assert!(seen.is_empty());

        log.append(TurnId(3)).await.unwrap();
        log.append(TurnId(11)).await.unwrap();
        // A crash in the middle of a write leaves part of a line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(log.path())
            .unwrap()
            .write_all(b"1")
            .unwrap();
        log.fold(|turns| async {
            seen.extend(turns);
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
        assert_eq!(seen, vec![TurnId(3), TurnId(11)]);
        assert_eq!(std::fs::read_to_string(log.path()).unwrap(), "");

        // Appends after a fold land at the start of the emptied file.
        log.append(TurnId(12)).await.unwrap();
        assert_eq!(std::fs::read_to_string(log.path()).unwrap(), "12\n");
        // A fold that fails keeps the marks.
        let failed = log
            .fold(|_| async { Err(std::io::Error::other("database down")) })
            .await;
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(log.path()).unwrap(), "12\n");
    }
}
