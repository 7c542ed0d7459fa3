//! What a call may do in a tainted session: one that holds untrusted
//! content (a web page, an MCP tool's output, a webhook body) which the
//! owner has not cleared. The chain an injected instruction needs is
//! "read something private, then send it out"; both links are held:
//!
//! - reading what the turn did not bring in (files other than those it
//!   wrote, memory, other sessions) needs a person, unless the owner's
//!   message names the path;
//! - every call that can carry data out (the network, messages, commands,
//!   MCP tools, memory writes) needs a person, unless its URL or target
//!   appears verbatim in the owner's message or in the content already
//!   fetched (following a link is fine; composing one is how data leaves);
//! - writing a file the agent later reads as instructions (`AGENTS.md`,
//!   `SOUL.md`, `HEARTBEAT.md`, skills) needs a person.
//!
//! "A person" means an approver that asks one: `--yes` (approve-all) does
//! not answer for these calls; they are denied with a reason the model
//! sees. `tools.taint: allow` turns all this off for an agent, leaving the
//! older rule (state-changing calls ask once untrusted content is in the
//! turn). Whatever the taint, calls whose arguments carry an obvious
//! injection (instructions to ignore the rules) or exfiltration pattern (a
//! long encoded blob in a URL to a host nobody named) are refused.

use std::sync::LazyLock;

use flynn_protocol::config::TaintPolicy;
use flynn_protocol::{ToolCall, ToolEffect};
use regex::Regex;
use serde_json::Value;

use crate::provenance::{host_of, urls};
use crate::{Tool, ToolContext};

/// What the taint rules ask of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Nothing beyond the hooks and the autonomy.
    Free,
    /// Ask first; an approve-all approver may answer.
    Ask(String),
    /// Only a person may approve it.
    Person(String),
    /// Refused whoever approves.
    Refuse(String),
}

/// File names the agent reads as instructions.
const PROMPT_FILES: [&str; 5] = [
    "AGENTS.md",
    "SOUL.md",
    "HEARTBEAT.md",
    "SKILL.md",
    "manifest.json",
];

/// Argument keys that name where a network call goes, or what it asks.
const NETWORK_TARGETS: [&str; 6] = ["url", "uri", "href", "endpoint", "query", "q"];

/// Argument keys that name whom a message goes to.
const MESSAGE_TARGETS: [&str; 5] = ["session", "to", "chat", "channel", "deliver_to"];

/// Shorter runs of encoded-looking characters in a URL are ids and paths.
const BLOB_MIN: usize = 40;

static IGNORE_RULES: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?is)\b(?:ignore|disregard|forget|override)\b.{0,40}?",
        r"\b(?:previous|prior|above|earlier|all|any|your|the|system)\b.{0,40}?",
        r"\b(?:instructions|rules|prompts?|guidelines|directives)\b",
    ))
    .ok()
});

static BLOB: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/=_%\-]{40,}").ok());

/// What the taint rules and the injection guard ask of `call`.
pub(crate) fn hold(tool: &dyn Tool, call: &ToolCall, ctx: &ToolContext) -> Hold {
    let provenance = &ctx.provenance;
    let effect = tool.effect();
    if let Some(reason) = injection(effect, &call.arguments, ctx) {
        return Hold::Refuse(reason);
    }
    let Some(source) = provenance.untrusted_source() else {
        return Hold::Free;
    };
    let because = format!("untrusted content from {source} is in this session");
    if ctx.policy.taint() == TaintPolicy::Allow {
        // `tools.taint: allow`: only the older per-turn rule.
        return if effect.changes_state() && provenance.new_source().is_some() {
            Hold::Ask(because)
        } else {
            Hold::Free
        };
    }
    if tool.reads_private_data() {
        return match read_target(&call.arguments) {
            Some(path) => {
                let own = ctx
                    .confine(path)
                    .is_ok_and(|resolved| provenance.wrote(&resolved));
                if own || provenance.named_by_owner(path) {
                    Hold::Free
                } else {
                    Hold::Person(format!(
                        "it reads {path}, which this turn did not bring in, and {because}"
                    ))
                }
            }
            None => Hold::Person(format!(
                "it reads data this turn did not bring in, and {because}"
            )),
        };
    }
    match effect {
        ToolEffect::ReadOnly => Hold::Free,
        ToolEffect::Network => {
            let targets = strings_at(&call.arguments, &NETWORK_TARGETS);
            let unknown = targets.iter().find(|target| {
                if target.starts_with("http://") || target.starts_with("https://") {
                    !provenance.knows_url(target)
                } else {
                    !provenance.named_by_owner(target)
                }
            });
            match (targets.is_empty(), unknown) {
                (false, None) => Hold::Free,
                (_, Some(target)) => Hold::Person(format!(
                    "it could carry data out ({target} is neither in your message nor in the content read), and {because}"
                )),
                (true, None) => Hold::Person(format!("it could carry data out, and {because}")),
            }
        }
        ToolEffect::SendsMessages => {
            let targets = strings_at(&call.arguments, &MESSAGE_TARGETS);
            if !targets.is_empty() && targets.iter().all(|t| provenance.named_by_owner(t)) {
                Hold::Ask(because)
            } else {
                Hold::Person(format!(
                    "it sends a message to someone your message does not name, and {because}"
                ))
            }
        }
        ToolEffect::WritesFiles => match path_argument(&call.arguments) {
            Some(path) if is_prompt_file(path) => Hold::Person(format!(
                "{path} is read as instructions in later turns, and {because}"
            )),
            _ => Hold::Ask(because),
        },
        ToolEffect::RunsProcesses | ToolEffect::External | ToolEffect::WritesMemory => {
            Hold::Person(format!(
                "it could carry data out or persist it, and {because}"
            ))
        }
        ToolEffect::ActsOnAccount => Hold::Person(format!(
            "it acts in your account (it could send your data out or change what others see), and {because}"
        )),
    }
}

/// Why `arguments` look like an injection or an exfiltration, if they do.
fn injection(effect: ToolEffect, arguments: &Value, ctx: &ToolContext) -> Option<String> {
    let mut texts = Vec::new();
    collect_strings(arguments, &mut texts);
    // Instructions to drop the rules, on their way into memory, a message
    // or another system.
    if matches!(
        effect,
        ToolEffect::WritesMemory
            | ToolEffect::SendsMessages
            | ToolEffect::Network
            | ToolEffect::External
            | ToolEffect::ActsOnAccount
    ) && let Some(pattern) = IGNORE_RULES.as_ref()
        && let Some(found) = texts.iter().find_map(|text| pattern.find(text))
    {
        return Some(format!(
            "its arguments tell the reader to drop its rules (\"{}\"), which is how injected instructions spread; refused",
            found.as_str()
        ));
    }
    // A long encoded blob in a URL to a host nobody named.
    for text in &texts {
        for url in urls(text) {
            let Some(host) = host_of(&url) else { continue };
            if ctx.provenance.knows_host(&host) {
                continue;
            }
            let after_host = url.splitn(4, '/').nth(3).unwrap_or_default();
            if let Some(blob) = BLOB
                .as_ref()
                .and_then(|pattern| pattern.find(after_host))
                .filter(|blob| looks_encoded(blob.as_str()))
            {
                return Some(format!(
                    "it would send a {}-character encoded string to {host}, a host neither your message nor the content read names; refused",
                    blob.as_str().len()
                ));
            }
        }
    }
    None
}

/// A run of letters and digits mixed, as base64, hex or tokens are.
fn looks_encoded(run: &str) -> bool {
    run.len() >= BLOB_MIN
        && run.chars().any(|c| c.is_ascii_digit())
        && run.chars().any(|c| c.is_ascii_alphabetic())
}

fn path_argument(arguments: &Value) -> Option<&str> {
    arguments.get("path").and_then(Value::as_str)
}

/// What a private read names: a file, a session or a memory file.
fn read_target(arguments: &Value) -> Option<&str> {
    ["path", "session", "namespace"]
        .iter()
        .find_map(|key| arguments.get(*key).and_then(Value::as_str))
}

fn is_prompt_file(path: &str) -> bool {
    let path = std::path::Path::new(path);
    let named = path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| PROMPT_FILES.iter().any(|p| p.eq_ignore_ascii_case(name)));
    named || path.components().any(|c| c.as_os_str() == "skills")
}

/// The string values of `arguments` (top level) at these keys.
fn strings_at<'a>(arguments: &'a Value, keys: &[&str]) -> Vec<&'a str> {
    keys.iter()
        .filter_map(|key| arguments.get(*key))
        .flat_map(|value| match value {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}
