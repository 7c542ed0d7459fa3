//! The store's records as the protocol's types, for the gateway and for
//! the CLI's local mode, which prints the same shapes.

use flynn_api::{PairedSender, PairingCode, UsageTotals};

/// A usage total as `usage.summary` reports it.
pub fn totals(total: &flynn_sessions::UsageTotal) -> UsageTotals {
    UsageTotals {
        calls: total.calls,
        usage: total.usage,
        cost_usd: total.cost_usd,
        unpriced_calls: total.unpriced_calls,
    }
}

/// A waiting pairing code as `pairing.list` reports it.
pub fn pairing_code(p: flynn_sessions::PendingPairing) -> PairingCode {
    PairingCode {
        channel: p.channel,
        code: p.code,
        sender: p.sender,
        name: p.name,
        created_at: p.created_at,
        expires_at: p.expires_at,
    }
}

/// A sender approved by pairing as `pairing.list` reports it.
pub fn paired_sender(p: flynn_sessions::ApprovedPeer) -> PairedSender {
    PairedSender {
        channel: p.channel,
        sender: p.sender,
        name: p.name,
        approved_at: p.approved_at,
        owner: p.owner,
    }
}
