//! Which config changes touch security, and the audit line each such
//! `config.patch` leaves in the tool audit log (`tools.jsonl`, as the
//! tool `config.patch`, the client as the agent).

use flynn_tools::AuditRecord;
use serde_json::{Value, json};

use crate::auth::Client;
use crate::server::State;

/// Whether setting `path` (dotted, as `config.patch` takes it) changes a
/// security setting: the gateway, the sandbox, the workspace, autonomy,
/// tool policy and hooks, MCP servers (what they run and whether they are
/// trusted), chat channels' access lists and owners. A path above one of
/// those (`tools`, `mcp`, the whole config) counts too.
pub(crate) fn security_sensitive(path: &str) -> bool {
    let parts: Vec<&str> = path
        .split('.')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    match parts.as_slice() {
        [] => true,
        ["gateway", ..] | ["mcp", ..] | ["version"] => true,
        ["tools"] | ["agents"] | ["channels"] => true,
        ["tools", first, ..] => matches!(
            *first,
            "sandbox"
                | "workspace"
                | "autonomy"
                | "profile"
                | "enabled"
                | "deny"
                | "hooks"
                | "taint"
                | "env"
                | "providers"
                | "audit"
        ),
        ["agents", _] => true,
        ["agents", _, field, ..] => matches!(
            *field,
            "tools" | "workspace" | "autonomy" | "can_delegate" | "models"
        ),
        ["channels", _] => true,
        ["channels", _, field, ..] => matches!(
            *field,
            "enabled"
                | "allow_from"
                | "dm_policy"
                | "allow_groups"
                | "owners"
                | "require_mention"
                | "rate_limit"
                | "access"
        ),
        _ => false,
    }
}

/// Whether a value at `path` may hold a secret (shown as `***`).
fn secret_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    [
        "token", "secret", "key", "password", "env", "headers", "args",
    ]
    .iter()
    .any(|word| lower.contains(word))
}

/// Records a `config.patch` that touched security settings.
pub(crate) fn config_change(
    state: &State,
    client: &Client,
    changes: &[(String, Value)],
    written: bool,
) {
    let shown: Vec<Value> = changes
        .iter()
        .map(|(path, value)| {
            let value = if secret_path(path) {
                json!("***")
            } else {
                value.clone()
            };
            json!({ "path": path, "value": value, "security": security_sensitive(path) })
        })
        .collect();
    tracing::warn!(
        by = %client.principal,
        paths = %changes.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>().join(", "),
        written,
        "config.patch changed security settings"
    );
    let Some(audit) = state.manager.executor().audit() else {
        return;
    };
    let time_ms = u64::try_from(crate::approver::now_millis()).unwrap_or(0);
    audit.record(&AuditRecord {
        time_ms,
        session: "gateway:config".to_owned(),
        principal: client.turn_principal().to_string(),
        agent: client.principal.clone(),
        turn: None,
        call_id: format!("config-{}", uuid::Uuid::now_v7().simple()),
        tool: "config.patch".to_owned(),
        effect: None,
        gate: None,
        gate_reason: Some("security settings".to_owned()),
        outcome: if written { "ok" } else { "error" },
        duration_ms: 0,
        arguments: json!({ "set": shown }),
        output: String::new(),
        output_bytes: 0,
        untrusted: false,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_settings_are_recognised() {
        for path in [
            "gateway.token",
            "gateway",
            "tools.sandbox.mode",
            "tools.autonomy",
            "agents.main.tools.deny",
            "mcp.servers.x.command",
            "mcp.servers.x",
            "channels.telegram.allow_from",
            "channels.telegram",
            "tools",
            "",
        ] {
            assert!(security_sensitive(path), "{path}");
        }
        for path in [
            "models.tiers.default",
            "agents.main.system_prompt",
            "memory.enabled",
            "channels.telegram.bot_token",
        ] {
            assert!(!security_sensitive(path), "{path}");
        }
    }
}
