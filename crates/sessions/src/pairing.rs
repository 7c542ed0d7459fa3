//! Pairing: how a sender the config does not list gets in. An unknown
//! sender who writes gets a short code; the owner approves it (`flynn
//! pairing approve <channel> <code>`), which admits the sender from then
//! on. Codes expire, each sender has at most one pending code per channel
//! (asking again shows the same code), and a channel keeps at most
//! [`MAX_PENDING`]. When a channel is full, new requests are refused
//! ([`PairingError::Full`]: the sender is told to try later) and the
//! codes already given keep waiting, so a flood of new accounts cannot
//! push out a real request the owner is about to approve; a slot frees
//! when a code is approved or expires.
//! Stored with the sessions, so approvals survive restarts and the CLI
//! can approve while the daemon runs.

use serde::Serialize;

/// Letters and digits that cannot be mistaken for one another (no 0/O,
/// 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Characters in a code.
pub const CODE_LEN: usize = 6;
/// How long a code can be approved.
pub const CODE_TTL_MS: i64 = 60 * 60 * 1000;
/// Pending codes kept per channel.
pub const MAX_PENDING: usize = 100;
/// Fresh codes tried for one request before giving up (each collides
/// with a pending code of the channel with odds of at most 100 in 887
/// million).
pub const CODE_ATTEMPTS: u32 = 16;

/// A code waiting for the owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingPairing {
    pub channel: String,
    pub sender: String,
    /// The sender's name on the platform, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub code: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub expires_at: i64,
}

/// A sender let in by pairing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovedPeer {
    pub channel: String,
    pub sender: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unix milliseconds.
    pub approved_at: i64,
    /// Promoted to owner (`flynn pairing approve --owner`).
    #[serde(default)]
    pub owner: bool,
}

/// The code a sender should be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingTicket {
    pub code: String,
    /// False when the sender had this code already (it was shown before).
    pub fresh: bool,
    pub expires_at: i64,
}

/// Why an approval failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    #[error(
        "no pairing code {code} on {channel} (codes are {CODE_LEN} letters and digits; `flynn pairing list` shows the pending ones)"
    )]
    Unknown { channel: String, code: String },
    #[error(
        "pairing code {code} on {channel} expired; ask the sender to write again for a new one"
    )]
    Expired { channel: String, code: String },
    /// A new code refused: the channel has [`MAX_PENDING`] waiting. The
    /// first of them expires at `frees_at` (Unix milliseconds).
    #[error(
        "{channel} has {pending} pairing codes waiting, the most it keeps; no new code until one is approved or expires (`flynn pairing list` shows them)"
    )]
    Full {
        channel: String,
        pending: usize,
        frees_at: i64,
    },
    /// No code could be made: the OS's random source failed, or every
    /// code tried was taken.
    #[error("cannot make a pairing code on {channel}: {reason}; the sender may write again later")]
    NoCode { channel: String, reason: String },
}

/// A fresh random code; an error when the OS's random source fails (a
/// guessable code would let anyone in whom the owner approves by mistake).
pub fn new_code() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; CODE_LEN];
    getrandom::fill(&mut bytes)?;
    Ok(bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect())
}

/// A code as the owner typed it, in the stored form.
pub fn normalize_code(code: &str) -> String {
    code.trim().to_ascii_uppercase()
}
