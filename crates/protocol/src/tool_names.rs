use std::collections::HashMap;

use crate::ToolSpec;

/// The first parts of built-in tool names (`file` of `file.read`). Tools
/// from elsewhere (MCP servers, named `<server>.<tool>`) may not use them,
/// so a server can never stand in for a built-in tool.
pub const BUILTIN_TOOL_FAMILIES: &[&str] = &[
    "agents", "browser", "calendar", "cron", "docs", "drive", "file", "gmail", "mcp", "media",
    "memory", "process", "sessions", "shell", "skills", "tasks", "tool", "tools", "voice", "web",
];

/// The families of the Google tools, which the policy and the hooks also
/// match as one family, `google` (`google.*` is every one of them).
pub const GOOGLE_TOOL_FAMILIES: &[&str] = &["gmail", "calendar", "drive", "docs", "tasks"];

/// Whether `name` belongs to a built-in family (see
/// [`BUILTIN_TOOL_FAMILIES`]); the rest come from MCP servers.
pub fn is_builtin_tool(name: &str) -> bool {
    let family = name.split('.').next().unwrap_or(name);
    BUILTIN_TOOL_FAMILIES.contains(&family)
}

/// Maps dotted tool names (`shell.exec`) to names every provider accepts
/// (`^[a-zA-Z0-9_-]{1,64}$`) and back. Built per request from the offered
/// tools, so the mapping is reversible even when two names would collide.
#[derive(Debug, Clone, Default)]
pub struct ToolNameMap {
    to_wire: HashMap<String, String>,
    from_wire: HashMap<String, String>,
}

impl ToolNameMap {
    pub fn new(tools: &[ToolSpec]) -> Self {
        let mut map = ToolNameMap::default();
        for tool in tools {
            let base = sanitise(&tool.name);
            let mut wire = base.clone();
            let mut n = 2;
            while map.from_wire.contains_key(&wire) {
                let suffix = format!("_{n}");
                let keep = base.len().min(64 - suffix.len());
                wire = format!("{}{suffix}", &base[..keep]);
                n += 1;
            }
            map.to_wire.insert(tool.name.clone(), wire.clone());
            map.from_wire.insert(wire, tool.name.clone());
        }
        map
    }

    /// The name to send for a dotted tool name.
    pub fn to_wire<'a>(&'a self, name: &'a str) -> &'a str {
        self.to_wire.get(name).map_or(name, String::as_str)
    }

    /// The name to send for a tool the history mentions. A tool that is no
    /// longer offered is not in the map; its name is still made acceptable
    /// to every provider (the same way, so it stays recognisable).
    pub fn to_wire_or_sanitised(&self, name: &str) -> String {
        match self.to_wire.get(name) {
            Some(wire) => wire.clone(),
            None => sanitise(name),
        }
    }

    /// The dotted name for a name the model sent back. Unknown names are
    /// returned as they are, so the executor can report them to the model.
    pub fn from_wire<'a>(&'a self, wire: &'a str) -> &'a str {
        self.from_wire.get(wire).map_or(wire, String::as_str)
    }
}

/// The name a tool goes by on the wire (`shell.exec` → `shell_exec`),
/// as [`ToolNameMap`] makes it when no other offered tool collides with
/// it: what to tell a model to call.
pub fn wire_name(name: &str) -> String {
    sanitise(name)
}

fn sanitise(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.truncate(64);
    if out.is_empty() {
        out.push('_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}).into(),
        }
    }

    #[test]
    fn dotted_names_round_trip() {
        let map = ToolNameMap::new(&[spec("shell.exec"), spec("file.read")]);
        assert_eq!(map.to_wire("shell.exec"), "shell_exec");
        assert_eq!(map.from_wire("shell_exec"), "shell.exec");
        assert_eq!(map.from_wire("file_read"), "file.read");
    }

    #[test]
    fn colliding_names_stay_distinct() {
        let map = ToolNameMap::new(&[spec("a.b"), spec("a_b")]);
        assert_eq!(map.to_wire("a.b"), "a_b");
        assert_eq!(map.to_wire("a_b"), "a_b_2");
        assert_eq!(map.from_wire("a_b_2"), "a_b");
        assert_eq!(map.from_wire("a_b"), "a.b");
    }

    #[test]
    fn tools_no_longer_offered_still_get_acceptable_names() {
        let map = ToolNameMap::new(&[spec("shell.exec")]);
        assert_eq!(map.to_wire_or_sanitised("shell.exec"), "shell_exec");
        assert_eq!(map.to_wire_or_sanitised("web.fetch"), "web_fetch");
        assert_eq!(map.to_wire_or_sanitised("mcp:git/log"), "mcp_git_log");
    }

    #[test]
    fn unknown_wire_names_pass_through() {
        let map = ToolNameMap::new(&[spec("shell.exec")]);
        assert_eq!(map.from_wire("nope"), "nope");
    }
}
