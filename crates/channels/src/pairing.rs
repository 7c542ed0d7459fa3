//! Who may talk to Flynn on a channel: an allowlist per channel, and
//! pairing codes for senders not on it. An unknown sender who writes gets
//! a short code; the owner approves it (`flynn pairing approve <channel>
//! <code>`), which adds the sender to the approved list. Codes expire, and
//! each sender has at most one pending code at a time.
//!
//! Time is passed in (Unix milliseconds), so expiry is tested without
//! waiting.

use std::collections::{BTreeSet, HashMap};

/// Letters and digits that cannot be mistaken for one another (no 0/O,
/// 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Characters in a code.
pub const CODE_LEN: usize = 6;
/// How long a code can be approved, by default.
pub const DEFAULT_TTL_MS: i64 = 60 * 60 * 1000;
/// Pending codes kept per channel; the oldest go first beyond this.
const MAX_PENDING: usize = 100;

/// A code waiting for the owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPairing {
    pub channel: String,
    pub sender: String,
    pub code: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
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
}

/// What a channel does with a message from `sender`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// On the allowlist or approved: the message goes to the agent.
    Allowed,
    /// Unknown: answer with this code (and do not pass the message on).
    Pair { code: String, fresh: bool },
}

/// Allowlists, approved senders and pending codes of every channel.
#[derive(Debug, Default)]
pub struct Gate {
    /// Senders allowed by config, per channel.
    allowlist: HashMap<String, BTreeSet<String>>,
    /// Senders approved by pairing, per channel.
    approved: HashMap<String, BTreeSet<String>>,
    pending: Vec<PendingPairing>,
    ttl_ms: i64,
}

impl Gate {
    pub fn new(ttl_ms: i64) -> Self {
        Gate {
            ttl_ms: ttl_ms.max(1),
            ..Gate::default()
        }
    }

    /// Allows `sender` on `channel` without pairing (from config).
    pub fn allow(&mut self, channel: &str, sender: &str) {
        self.allowlist
            .entry(channel.to_owned())
            .or_default()
            .insert(sender.to_owned());
    }

    /// Senders approved by pairing, to store and restore.
    pub fn approved(&self, channel: &str) -> impl Iterator<Item = &str> {
        self.approved
            .get(channel)
            .into_iter()
            .flat_map(|s| s.iter().map(String::as_str))
    }

    /// Restores an approval (from storage).
    pub fn restore_approved(&mut self, channel: &str, sender: &str) {
        self.approved
            .entry(channel.to_owned())
            .or_default()
            .insert(sender.to_owned());
    }

    pub fn is_allowed(&self, channel: &str, sender: &str) -> bool {
        let listed = |map: &HashMap<String, BTreeSet<String>>| {
            map.get(channel).is_some_and(|s| s.contains(sender))
        };
        listed(&self.allowlist) || listed(&self.approved)
    }

    /// A message from `sender` arrived at `now`.
    pub fn admit(&mut self, channel: &str, sender: &str, now: i64) -> Admission {
        if self.is_allowed(channel, sender) {
            return Admission::Allowed;
        }
        self.expire(now);
        if let Some(pending) = self
            .pending
            .iter()
            .find(|p| p.channel == channel && p.sender == sender)
        {
            return Admission::Pair {
                code: pending.code.clone(),
                fresh: false,
            };
        }
        let code = loop {
            let code = new_code();
            if !self
                .pending
                .iter()
                .any(|p| p.channel == channel && p.code == code)
            {
                break code;
            }
        };
        let on_channel = self.pending.iter().filter(|p| p.channel == channel).count();
        if on_channel >= MAX_PENDING
            && let Some(oldest) = self.pending.iter().position(|p| p.channel == channel)
        {
            self.pending.remove(oldest);
        }
        self.pending.push(PendingPairing {
            channel: channel.to_owned(),
            sender: sender.to_owned(),
            code: code.clone(),
            created_at: now,
            expires_at: now + self.ttl_ms,
        });
        Admission::Pair { code, fresh: true }
    }

    /// Approves a code; returns the sender it admits from now on.
    pub fn approve(&mut self, channel: &str, code: &str, now: i64) -> Result<String, PairingError> {
        let wanted = code.trim().to_ascii_uppercase();
        let Some(index) = self
            .pending
            .iter()
            .position(|p| p.channel == channel && p.code == wanted)
        else {
            return Err(PairingError::Unknown {
                channel: channel.to_owned(),
                code: wanted,
            });
        };
        let pending = self.pending.remove(index);
        if pending.expires_at <= now {
            return Err(PairingError::Expired {
                channel: channel.to_owned(),
                code: wanted,
            });
        }
        self.restore_approved(channel, &pending.sender);
        Ok(pending.sender)
    }

    /// The codes still waiting at `now`, oldest first.
    pub fn pending(&mut self, now: i64) -> Vec<PendingPairing> {
        self.expire(now);
        self.pending.clone()
    }

    fn expire(&mut self, now: i64) {
        self.pending.retain(|p| p.expires_at > now);
    }
}

fn new_code() -> String {
    let mut bytes = [0u8; CODE_LEN];
    // Without the OS's randomness (never seen in practice) the code is
    // still a code, only guessable; pairing also needs the owner.
    let _ = getrandom::fill(&mut bytes);
    bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn code(admission: Admission) -> String {
        match admission {
            Admission::Pair { code, .. } => code,
            Admission::Allowed => panic!("expected a pairing code"),
        }
    }

    #[test]
    fn an_allowed_sender_passes_and_an_unknown_one_gets_one_code() {
        let mut gate = Gate::new(DEFAULT_TTL_MS);
        gate.allow("telegram", "42");
        assert_eq!(gate.admit("telegram", "42", 0), Admission::Allowed);
        // The allowlist is per channel.
        let first = gate.admit("discord", "42", 0);
        let Admission::Pair { code: c, fresh } = first else {
            panic!()
        };
        assert!(fresh);
        assert_eq!(c.len(), CODE_LEN);
        assert!(c.bytes().all(|b| ALPHABET.contains(&b)), "{c}");
        // Writing again gives the same code, not a new one.
        assert_eq!(
            gate.admit("discord", "42", 1000),
            Admission::Pair {
                code: c.clone(),
                fresh: false
            }
        );
        assert_eq!(gate.pending(1000).len(), 1);
    }

    #[test]
    fn approving_a_code_admits_its_sender_case_insensitively() {
        let mut gate = Gate::new(DEFAULT_TTL_MS);
        let c = code(gate.admit("slack", "U1", 0));
        assert_eq!(
            gate.approve("slack", &c.to_lowercase(), 10),
            Ok("U1".to_owned())
        );
        assert_eq!(gate.admit("slack", "U1", 20), Admission::Allowed);
        assert_eq!(gate.approved("slack").collect::<Vec<_>>(), ["U1"]);
        assert!(gate.pending(20).is_empty());
        // Used once.
        assert!(matches!(
            gate.approve("slack", &c, 30),
            Err(PairingError::Unknown { .. })
        ));
    }

    #[test]
    fn codes_expire_and_the_error_says_so() {
        let mut gate = Gate::new(1000);
        let c = code(gate.admit("whatsapp", "+15550001", 0));
        assert_eq!(
            gate.approve("whatsapp", &c, 1000),
            Err(PairingError::Expired {
                channel: "whatsapp".into(),
                code: c.clone()
            })
        );
        assert!(!gate.is_allowed("whatsapp", "+15550001"));
        // After expiry the sender gets a new code.
        let again = gate.admit("whatsapp", "+15550001", 2000);
        assert!(matches!(again, Admission::Pair { fresh: true, .. }));
        let error = gate.approve("whatsapp", "ZZZZZZ", 2000).unwrap_err();
        assert!(error.to_string().contains("flynn pairing list"), "{error}");
    }

    #[test]
    fn a_flood_of_strangers_keeps_at_most_the_newest_codes() {
        let mut gate = Gate::new(DEFAULT_TTL_MS);
        for sender in 0..150 {
            gate.admit("telegram", &sender.to_string(), sender);
        }
        let pending = gate.pending(200);
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(pending[0].sender, "50");
    }
}
