//! What one turn offers the model. Tools a plain turn rarely needs
//! (`tools.deferred`) are not sent with every request; the model finds them
//! with `tools.search`, and those it found are offered for the rest of the
//! turn. This keeps a plain turn small with many tools installed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use flynn_protocol::ToolSpec;

use crate::glob::{Glob, any_matches};
use crate::{Tool, ToolPolicy, ToolRegistry};

/// The name of the tool that finds deferred tools.
pub const TOOL_SEARCH: &str = "tools.search";

/// Tools deferred when `tools.deferred` is not set: background processes,
/// the searches, other sessions, sub-agents, scheduled jobs and the
/// browser, which a turn uses only now and then.
/// (`tool.output` is never offered until a turn has an output to read
/// back: see [`ToolCatalog::reveal`].)
pub const DEFAULT_DEFERRED: &[&str] = &[
    "process.*",
    "file.search",
    "file.list",
    "web.search",
    "memory.read",
    "memory.search",
    "sessions.*",
    "agents.*",
    "cron.*",
    "browser.*",
    "media.*",
    "voice.*",
    // Google: the everyday ones stay offered (reading and sending mail,
    // the calendar), the rest are found with tools.search.
    "gmail.attachment",
    "gmail.draft",
    "gmail.label",
    "calendar.update",
    "calendar.delete",
    "drive.*",
    "docs.*",
    "tasks.*",
];

/// One turn's view of the registry: the agent's policy, the deferred
/// tools, and which of them the model has found so far.
#[derive(Debug)]
pub struct ToolCatalog {
    registry: Arc<ToolRegistry>,
    policy: Arc<ToolPolicy>,
    deferred: Vec<Glob>,
    found: Mutex<BTreeSet<String>>,
}

impl ToolCatalog {
    /// `deferred`: `tools.deferred`, or [`DEFAULT_DEFERRED`] when absent.
    pub fn new(
        registry: Arc<ToolRegistry>,
        policy: Arc<ToolPolicy>,
        deferred: Option<&[String]>,
    ) -> Self {
        let deferred = match deferred {
            Some(patterns) => patterns.iter().map(|p| Glob::new(p)).collect(),
            None => DEFAULT_DEFERRED.iter().map(|p| Glob::new(p)).collect(),
        };
        ToolCatalog {
            registry,
            policy,
            deferred,
            found: Mutex::new(BTreeSet::new()),
        }
    }

    fn is_deferred(&self, name: &str) -> bool {
        name != TOOL_SEARCH && any_matches(&self.deferred, name)
    }

    /// `tool.output` reads back outputs shown condensed; it is offered only
    /// once a turn has one, and `tools.search` does not list it.
    fn on_reveal_only(name: &str) -> bool {
        name == crate::builtin::TOOL_OUTPUT
    }

    fn permitted(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = self.registry.tools();
        tools.retain(|tool| self.policy.permits(tool.as_ref()));
        tools
    }

    /// Deferred tools the policy permits that the model has not found yet.
    fn hidden(&self) -> Vec<Arc<dyn Tool>> {
        let found = self.found.lock().map(|f| f.clone()).unwrap_or_default();
        self.permitted()
            .into_iter()
            .filter(|tool| {
                self.is_deferred(tool.name())
                    && !found.contains(tool.name())
                    && !Self::on_reveal_only(tool.name())
            })
            .collect()
    }

    /// The specs to send with the next request, sorted by name: every
    /// permitted tool that is not deferred or has been found, and
    /// `tools.search` while something is left to find.
    pub fn offered(&self) -> Vec<ToolSpec> {
        let found = self.found.lock().map(|f| f.clone()).unwrap_or_default();
        let mut any_hidden = false;
        let mut specs = Vec::new();
        for tool in self.permitted() {
            let name = tool.name();
            if name == TOOL_SEARCH || (Self::on_reveal_only(name) && !found.contains(name)) {
                continue;
            }
            if self.is_deferred(name) && !found.contains(name) {
                any_hidden = true;
            } else {
                specs.push(crate::registry::spec(tool.as_ref()));
            }
        }
        if any_hidden && let Some(search) = self.registry.get(TOOL_SEARCH) {
            specs.push(crate::registry::spec(search.as_ref()));
            specs.sort_by(|a, b| a.name.cmp(&b.name));
        }
        specs
    }

    /// Offers `name` from the next request on, as if the model had found
    /// it (`tool.output` once an output was shown condensed).
    pub fn reveal(&self, name: &str) {
        if let Ok(mut found) = self.found.lock() {
            found.insert(name.to_owned());
        }
    }

    /// Finds up to `limit` hidden tools matching the words of `query` (in
    /// their names and descriptions; `*` lists them all), best first, and
    /// offers them from the next request on.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(String, String)> {
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric() && c != '*')
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let all = words.iter().any(|w| w == "*" || w == "all");
        let mut scored: Vec<(usize, Arc<dyn Tool>)> = self
            .hidden()
            .into_iter()
            .filter_map(|tool| {
                let haystack = format!("{} {}", tool.name(), tool.description()).to_lowercase();
                let score = words
                    .iter()
                    .filter(|w| haystack.contains(w.as_str()))
                    .count();
                (all || score > 0).then_some((score, tool))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name().cmp(b.1.name())));
        scored.truncate(limit.max(1));
        let hits: Vec<(String, String)> = scored
            .into_iter()
            .map(|(_, tool)| (tool.name().to_owned(), tool.description().to_owned()))
            .collect();
        if let Ok(mut found) = self.found.lock() {
            found.extend(hits.iter().map(|(name, _)| name.clone()));
        }
        hits
    }
}
