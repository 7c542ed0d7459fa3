//! Files turns send to their chats (`media.send`, `voice.say`), kept
//! where the channels and the web chat read them.
//!
//! A sent file is copied once, under `<dir>/<id>/<name>`, so what the
//! chat receives is what the agent sent even if the workspace file
//! changes afterwards, and the gateway can serve it by id without
//! reaching into the workspace. The id is random (a v7 UUID: its 74
//! random bits make it unguessable) and only ever handed to those who
//! may read the session, in its [`AgentEvent::Media`] event. Files are
//! kept for [`KEEP`] and removed by [`MediaStore::prune`], which the
//! store runs at most once an hour as files are added.
//!
//! [`AgentEvent::Media`]: flynn_protocol::AgentEvent::Media

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use flynn_protocol::sync::lock;
use flynn_protocol::{AgentEvent, MediaFile};
use flynn_tools::ToolError;
use flynn_tools::builtin::{MediaSender, OutgoingMedia};

use crate::events::TurnPublisher;

/// The largest file a turn may send (the Bot API's upload limit, which
/// is the largest of the chat platforms' but Slack's).
pub const MAX_MEDIA_BYTES: u64 = 50 * 1024 * 1024;
/// How long a sent file is kept for clients that come later.
pub const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often adding a file sweeps out old ones.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Where sent files are kept. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct MediaStore {
    dir: PathBuf,
    pruned: Mutex<Option<Instant>>,
}

impl MediaStore {
    /// A store under `dir` (created, 0700, when the first file comes).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        MediaStore {
            dir: dir.into(),
            pruned: Mutex::new(None),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Copies `media` into the store; returns what its event says.
    pub async fn keep(&self, media: OutgoingMedia) -> std::io::Result<MediaFile> {
        let size = media.data.len() as u64;
        if size > MAX_MEDIA_BYTES {
            return Err(std::io::Error::other(format!(
                "the file has {size} bytes, over the {MAX_MEDIA_BYTES} a chat file may have"
            )));
        }
        let name = safe_name(&media.name);
        let id = uuid::Uuid::now_v7().simple().to_string();
        let folder = self.dir.join(&id);
        let path = folder.join(&name);
        let (root, data) = (self.dir.clone(), media.data.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            create_private(&root)?;
            create_private(&folder)?;
            std::fs::write(&path, &data)
        })
        .await
        .map_err(std::io::Error::other)??;
        self.prune_now_and_then();
        Ok(MediaFile {
            id,
            name,
            media_type: media.media_type,
            size,
            kind: media.kind,
            caption: media.caption,
        })
    }

    /// The file kept under `id`: its name and bytes. `NotFound` for an
    /// id that is not one (anything but 32 hex digits) or was pruned.
    pub async fn read(&self, id: &str) -> std::io::Result<(String, Bytes)> {
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{id:?} is not a media id (32 hex digits)"),
            ));
        }
        let folder = self.dir.join(id);
        tokio::task::spawn_blocking(move || {
            let entry = std::fs::read_dir(&folder)?
                .next()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))??;
            let name = entry.file_name().to_string_lossy().into_owned();
            let data = std::fs::read(entry.path())?;
            Ok((name, Bytes::from(data)))
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Removes files kept longer than `keep`; returns how many.
    pub fn prune(&self, keep: Duration) -> std::io::Result<usize> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|at| now.duration_since(at).ok())
                .is_some_and(|age| age > keep);
            if old && std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn prune_now_and_then(&self) {
        {
            let mut pruned = lock(&self.pruned);
            if pruned.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
                return;
            }
            *pruned = Some(Instant::now());
        }
        match self.prune(KEEP) {
            Ok(0) => {}
            Ok(removed) => tracing::debug!(removed, "removed sent files older than a week"),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "could not remove old sent files")
            }
        }
    }
}

/// A turn's [`MediaSender`]: keeps the file and tells the turn's
/// subscribers (its chat, the web chat) in a `media` event.
pub(crate) struct TurnMedia {
    pub(crate) store: Option<Arc<MediaStore>>,
    pub(crate) events: TurnPublisher,
}

#[async_trait]
impl MediaSender for TurnMedia {
    async fn send_media(&self, media: OutgoingMedia) -> Result<MediaFile, ToolError> {
        let Some(store) = &self.store else {
            return Err(ToolError::failed(
                "this runtime keeps no files for chats (it has no FLYNN_HOME), so it cannot send one",
            ));
        };
        let file = store
            .keep(media)
            .await
            .map_err(|e| ToolError::failed(format!("could not keep the file to send: {e}")))?;
        self.events
            .publish(AgentEvent::Media { file: file.clone() });
        Ok(file)
    }
}

fn create_private(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
        }
        Err(e) => return Err(e),
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
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

    fn media(name: &str, data: &'static [u8]) -> OutgoingMedia {
        OutgoingMedia {
            name: name.to_owned(),
            media_type: "image/png".to_owned(),
            kind: MediaKind::Image,
            caption: None,
            data: Bytes::from_static(data),
        }
    }

    #[tokio::test]
    async fn a_kept_file_reads_back_by_its_id_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = MediaStore::new(dir.path().join("media"));
        let kept = store
            .keep(media("../../etc/chart.png", b"png bytes"))
            .await
            .unwrap();
        assert_eq!(kept.name, "chart.png");
        assert_eq!(kept.size, 9);
        let (name, data) = store.read(&kept.id).await.unwrap();
        assert_eq!((name.as_str(), &data[..]), ("chart.png", &b"png bytes"[..]));
        for bad in ["..", "../media", &"0".repeat(32), "x"] {
            let e = store.read(bad).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{bad}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("media"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
        }
    }

    #[tokio::test]
    async fn old_files_are_pruned_and_new_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = MediaStore::new(dir.path());
        let kept = store.keep(media("a.png", b"a")).await.unwrap();
        assert_eq!(store.prune(Duration::from_secs(3600)).unwrap(), 0);
        assert!(store.read(&kept.id).await.is_ok());
        // Anything is older than no time at all.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(store.prune(Duration::ZERO).unwrap(), 1);
        assert!(store.read(&kept.id).await.is_err());
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_refused_with_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = MediaStore::new(dir.path());
        let big = OutgoingMedia {
            data: Bytes::from(vec![0u8; MAX_MEDIA_BYTES as usize + 1]),
            ..media("big.bin", b"")
        };
        let e = store.keep(big).await.unwrap_err();
        assert!(e.to_string().contains("52428800"), "{e}");
    }
}
