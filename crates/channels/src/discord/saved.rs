//! What the adapter keeps across restarts (of the adapter or the
//! daemon), in one JSON file under `FLYNN_HOME`: the gateway session to
//! RESUME (`session_id`, the sequence number of the last dispatch the
//! daemon took, `resume_gateway_url`), the bot as READY introduced it
//! (a resumed session gets no READY), and per channel the last message
//! the daemon took, from which messages missed while no session could be
//! resumed are read back over REST.
//!
//! The file belongs to one bot token (a SHA-256 prefix of it is kept,
//! never the token): a file of another token is ignored. Writes go to a
//! temporary file in the same directory, are synced, renamed over the
//! file, and the directory is synced, so a crash leaves the old file or
//! the new one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::CHANNEL;
use super::convert::Identity;

/// Channels whose last message is kept; past that, the one quiet the
/// longest is forgotten (its missed messages are then not read back).
pub(super) const MAX_CHANNELS: usize = 100;

/// The file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Saved {
    /// The first 16 hex digits of the token's SHA-256.
    token: String,
    #[serde(default)]
    pub bot: Option<SavedBot>,
    #[serde(default)]
    pub session: Option<SavedSession>,
    /// Channel id → the last message taken there.
    #[serde(default)]
    pub channels: BTreeMap<u64, Mark>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SavedBot {
    pub id: u64,
    pub application: u64,
    pub name: String,
}

/// A gateway session to resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SavedSession {
    pub id: String,
    /// The last dispatch the daemon took (or that needed nothing from
    /// it): Discord replays what came after.
    pub seq: u64,
    /// READY's `resume_gateway_url`; `None` when it could not be reached
    /// (the configured gateway is used then).
    pub resume_url: Option<String>,
}

/// The last message taken in a channel, and the server the channel is
/// in (REST message objects do not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Mark {
    pub last: u64,
    #[serde(default)]
    pub guild: Option<u64>,
}

fn fingerprint(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    hex::encode(&digest[..8])
}

impl Saved {
    /// Nothing saved yet, for `token`.
    pub fn empty(token: &str) -> Saved {
        Saved {
            token: fingerprint(token),
            ..Saved::default()
        }
    }

    /// The file at `path` when it belongs to `token`; empty when there is
    /// none, and (with a warning naming the file) when it cannot be read
    /// or was written for another token.
    pub fn load(path: &Path, token: &str) -> Saved {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Saved::empty(token);
            }
            Err(error) => {
                tracing::warn!(channel = CHANNEL, path = %path.display(), %error, "cannot read the saved gateway session; starting a new one");
                return Saved::empty(token);
            }
        };
        match serde_json::from_str::<Saved>(&text) {
            Ok(saved) if saved.token == fingerprint(token) => saved,
            Ok(_) => {
                tracing::info!(channel = CHANNEL, path = %path.display(), "the saved gateway session belongs to another bot token; starting a new one");
                Saved::empty(token)
            }
            Err(error) => {
                tracing::warn!(channel = CHANNEL, path = %path.display(), %error, "the saved gateway session is not what Flynn writes (expected its JSON); starting a new one");
                Saved::empty(token)
            }
        }
    }

    /// Writes it to `path` atomically (0600 on unix: a session id lets
    /// the token's holder resume it).
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomically(path, &text)
    }

    pub fn identity(&self) -> Option<Identity> {
        self.bot.as_ref().map(|bot| Identity {
            bot: bot.id,
            application: bot.application,
            name: bot.name.clone(),
        })
    }

    pub fn set_identity(&mut self, identity: &Identity) {
        self.bot = Some(SavedBot {
            id: identity.bot,
            application: identity.application,
            name: identity.name.clone(),
        });
    }

    /// Records `message` as taken in `channel`, forgetting the channel
    /// quiet the longest when more than [`MAX_CHANNELS`] are kept.
    pub fn mark(&mut self, channel: u64, message: u64, guild: Option<u64>) {
        let mark = self.channels.entry(channel).or_insert(Mark {
            last: message,
            guild,
        });
        mark.last = mark.last.max(message);
        if mark.guild.is_none() {
            mark.guild = guild;
        }
        if self.channels.len() > MAX_CHANNELS
            && let Some(quiet) = self
                .channels
                .iter()
                .min_by_key(|(_, mark)| mark.last)
                .map(|(id, _)| *id)
        {
            self.channels.remove(&quiet);
            tracing::debug!(
                channel = CHANNEL,
                forgotten = quiet,
                "keeping the last message of {MAX_CHANNELS} channels; forgot the quietest"
            );
        }
    }
}

/// `text` to `path` through a synced temporary file in the same
/// directory, renamed over it; the directory is created (0700) when
/// missing and synced after the rename.
fn write_atomically(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "discord.json".to_owned());
    let temp: PathBuf = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&temp).and_then(|mut file| {
        file.write_all(text)?;
        file.sync_all()
    });
    if let Err(error) = written.and_then(|()| std::fs::rename(&temp, path)) {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_round_trips_and_belongs_to_its_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("discord.json");
        let mut saved = Saved::empty("token-a");
        saved.session = Some(SavedSession {
            id: "abc".into(),
            seq: 7,
            resume_url: Some("wss://resume.example".into()),
        });
        saved.mark(10, 500, Some(1));
        saved.store(&path).unwrap();
        assert_eq!(Saved::load(&path, "token-a"), saved);
        assert_eq!(Saved::load(&path, "token-b"), Saved::empty("token-b"));
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(Saved::load(&path, "token-a"), Saved::empty("token-a"));
        assert_eq!(
            Saved::load(&dir.path().join("none.json"), "token-a"),
            Saved::empty("token-a")
        );
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("discord.json")]);
    }

    #[test]
    fn marks_only_grow_and_the_quietest_channel_goes_first() {
        let mut saved = Saved::empty("t");
        saved.mark(1, 100, None);
        saved.mark(1, 90, Some(5));
        assert_eq!(
            saved.channels.get(&1),
            Some(&Mark {
                last: 100,
                guild: Some(5)
            })
        );
        for channel in 2..=(MAX_CHANNELS as u64 + 1) {
            saved.mark(channel, 1000 + channel, None);
        }
        assert_eq!(saved.channels.len(), MAX_CHANNELS);
        assert!(!saved.channels.contains_key(&1), "the quietest was dropped");
    }
}
