//! Files turns send to their chats (`media.send`, `voice.say`), kept
//! in the session store ([`Files`]) where the channels, the web chat and
//! the outbox read them.
//!
//! A sent file is copied once, so what the chat receives is what the
//! agent sent even if the workspace file changes afterwards, and the
//! gateway can serve it by id without reaching into the workspace. Kept
//! in the store, a file one node of a cluster kept is sent by the node
//! holding the chat's connection, and one a process died before sending
//! is sent at the next start. The id is random (a v7 UUID: its 74 random
//! bits make it unguessable) and only ever handed to those who may read
//! the session, in its [`AgentEvent::Media`] event. Files are kept for
//! [`KEEP`] and removed by [`MediaStore::prune`], which runs at most once
//! an hour as files are added.
//!
//! [`AgentEvent::Media`]: flynn_protocol::AgentEvent::Media

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use flynn_protocol::sync::lock;
use flynn_protocol::{AgentEvent, MediaFile, SessionKey, TurnId};
use flynn_sessions::{SessionStore, StoredFile};
use flynn_tools::ToolError;
use flynn_tools::builtin::{MediaSender, OutgoingMedia};

use crate::events::{TurnPublisher, now_millis};

/// The largest file a turn may send (the Bot API's upload limit, which
/// is the largest of the chat platforms' but Slack's).
pub const MAX_MEDIA_BYTES: u64 = 50 * 1024 * 1024;
/// How long a sent file is kept for clients that come later.
pub const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often adding a file sweeps out old ones.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The files turns sent, in the session store. Cheap to share behind an
/// `Arc`.
pub struct MediaStore {
    store: Arc<dyn SessionStore>,
    pruned: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for MediaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaStore").finish_non_exhaustive()
    }
}

impl MediaStore {
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        MediaStore {
            store,
            pruned: Mutex::new(None),
        }
    }

    /// Keeps `media`, sent by `turn` of `session`; returns what its event
    /// says.
    pub async fn keep(
        &self,
        session: &SessionKey,
        turn: Option<TurnId>,
        media: OutgoingMedia,
    ) -> Result<MediaFile, String> {
        let size = media.data.len() as u64;
        if size > MAX_MEDIA_BYTES {
            return Err(format!(
                "the file has {size} bytes, over the {MAX_MEDIA_BYTES} a chat file may have"
            ));
        }
        let file = MediaFile {
            id: uuid::Uuid::now_v7().simple().to_string(),
            name: safe_name(&media.name),
            media_type: media.media_type,
            size,
            kind: media.kind,
            caption: media.caption,
        };
        self.store
            .keep_file(session, turn, &file, &media.data)
            .await
            .map_err(|e| e.to_string())?;
        self.prune_now_and_then().await;
        Ok(file)
    }

    /// The file kept under `id`, with its bytes; `None` for an id that is
    /// not one (anything but 32 hex digits) or was pruned.
    pub async fn read(&self, id: &str) -> flynn_sessions::Result<Option<(StoredFile, Bytes)>> {
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        Ok(self
            .store
            .file(id)
            .await?
            .map(|(file, data)| (file, Bytes::from(data))))
    }

    /// Records that a file was handed to its chat (sent, or refused and
    /// the chat told), so the outbox does not send it again.
    pub async fn mark_sent(&self, id: &str) {
        if let Err(e) = self.store.mark_file_sent(id).await {
            tracing::warn!(%id, error = %e, "could not record that a file was sent; it may be sent again at the next start");
        }
    }

    /// The files `turns` of `session` sent, oldest first.
    pub async fn of_turns(
        &self,
        session: &SessionKey,
        turns: &[TurnId],
    ) -> flynn_sessions::Result<Vec<StoredFile>> {
        self.store.files_of_turns(session, turns).await
    }

    /// Removes files kept longer than `keep`; returns how many.
    pub async fn prune(&self, keep: Duration) -> flynn_sessions::Result<u64> {
        let keep = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        self.store
            .prune_files(now_millis().saturating_sub(keep))
            .await
    }

    async fn prune_now_and_then(&self) {
        {
            let mut pruned = lock(&self.pruned);
            if pruned.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
                return;
            }
            *pruned = Some(Instant::now());
        }
        match self.prune(KEEP).await {
            Ok(0) => {}
            Ok(removed) => tracing::debug!(removed, "removed sent files older than a week"),
            Err(e) => tracing::warn!(error = %e, "could not remove old sent files"),
        }
    }
}

/// A turn's [`MediaSender`]: keeps the file and tells the turn's
/// subscribers (its chat, the web chat) in a `media` event.
pub(crate) struct TurnMedia {
    pub(crate) store: Arc<MediaStore>,
    pub(crate) session: SessionKey,
    pub(crate) events: TurnPublisher,
}

#[async_trait]
impl MediaSender for TurnMedia {
    async fn send_media(&self, media: OutgoingMedia) -> Result<MediaFile, ToolError> {
        let file = self
            .store
            .keep(&self.session, Some(self.events.turn), media)
            .await
            .map_err(|e| ToolError::failed(format!("could not keep the file to send: {e}")))?;
        self.events
            .publish(AgentEvent::Media { file: file.clone() });
        Ok(file)
    }
}

/// A file name that is one path component, printable, at most 128
/// characters, never empty or a dot name.
fn safe_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let mut clean: String = base.chars().filter(|c| !c.is_control()).take(128).collect();
    clean = clean.trim().trim_start_matches('.').to_owned();
    if clean.is_empty() {
        "file".to_owned()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    use flynn_protocol::MediaKind;
    use flynn_sessions::SqliteStore;

    fn media(name: &str, data: &'static [u8]) -> OutgoingMedia {
        OutgoingMedia {
            name: name.to_owned(),
            media_type: "image/png".to_owned(),
            kind: MediaKind::Image,
            caption: None,
            data: Bytes::from_static(data),
        }
    }

    async fn store() -> (tempfile::TempDir, MediaStore) {
        let dir = tempfile::tempdir().unwrap();
        let sessions = SqliteStore::open(&dir.path().join("sessions.db"))
            .await
            .unwrap();
        (dir, MediaStore::new(Arc::new(sessions)))
    }

    fn session() -> SessionKey {
        "telegram:42".parse().unwrap()
    }

    #[tokio::test]
    async fn a_kept_file_reads_back_by_its_id_and_nothing_else_does() {
        let (_dir, store) = store().await;
        let kept = store
            .keep(&session(), None, media("../../etc/chart.png", b"png bytes"))
            .await
            .unwrap();
        assert_eq!(kept.name, "chart.png");
        assert_eq!(kept.size, 9);
        let (file, data) = store.read(&kept.id).await.unwrap().unwrap();
        assert_eq!((&file.file, &data[..]), (&kept, &b"png bytes"[..]));
        assert_eq!(file.session, session());
        for bad in ["..", "../media", &"0".repeat(32), "x", "' OR 1=1 --"] {
            assert_eq!(store.read(bad).await.unwrap(), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn old_files_are_pruned_and_new_ones_kept() {
        let (_dir, store) = store().await;
        let kept = store
            .keep(&session(), None, media("a.png", b"a"))
            .await
            .unwrap();
        assert_eq!(store.prune(Duration::from_secs(3600)).await.unwrap(), 0);
        assert!(store.read(&kept.id).await.unwrap().is_some());
        // Anything is older than no time at all.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(store.prune(Duration::ZERO).await.unwrap(), 1);
        assert_eq!(store.read(&kept.id).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_refused_with_the_limit() {
        let (_dir, store) = store().await;
        let big = OutgoingMedia {
            data: Bytes::from(vec![0u8; MAX_MEDIA_BYTES as usize + 1]),
            ..media("big.bin", b"")
        };
        let e = store.keep(&session(), None, big).await.unwrap_err();
        assert!(e.contains("52428800"), "{e}");
    }
}
