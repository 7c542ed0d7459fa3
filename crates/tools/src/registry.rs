use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use flynn_protocol::{ToolNameMap, ToolSpec};
use serde_json::{Value, json};

use crate::{Tool, ToolPolicy, TypedTool};

/// Tools that come and go while Flynn runs: an MCP server's, known once
/// the server has started and listed them, and listed again when it says
/// they changed. Every tool of a source is named `<name>.<tool>`.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// The first part of every tool name this source gives (`github` for
    /// `github.create_issue`).
    fn name(&self) -> &str;

    /// The tools as the source knows them now; empty before it first
    /// listed them.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;

    /// Gets the tools ready: starts a source that starts on demand, and
    /// waits (within the source's own limit) for its first listing. Called
    /// before a turn lists the tools of an agent that may use them.
    async fn prepare(&self) {}

    /// Stops whatever the source runs; called once when Flynn shuts down.
    async fn shutdown(&self) {}
}

/// The tools offered to the model, by dotted name: the built-in ones,
/// fixed when the registry is built, and those of its [`ToolSource`]s,
/// read each time they are asked for.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field(
                "sources",
                &self.sources.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a typed tool, replacing any tool of the same name.
    pub fn register<T: TypedTool>(&mut self, tool: T) -> &mut Self {
        self.register_dyn(crate::into_dyn(tool))
    }

    /// Adds an already type-erased tool.
    pub fn register_dyn(&mut self, tool: Arc<dyn Tool>) -> &mut Self {
        self.tools.insert(tool.name().to_owned(), tool);
        self
    }

    /// Adds a source of tools (an MCP server). A source's tool never
    /// replaces a built-in one of the same name.
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) -> &mut Self {
        self.sources.push(source);
        self
    }

    /// Keeps only the named built-in tools (sources stay). Returns the
    /// names that matched nothing.
    pub fn retain(&mut self, names: &[String]) -> Vec<String> {
        let unknown = names
            .iter()
            .filter(|n| !self.tools.contains_key(n.as_str()))
            .cloned()
            .collect();
        self.tools.retain(|name, _| names.contains(name));
        unknown
    }

    /// The tool named `name`: a built-in one, else the one its source
    /// (named by the part before the first `.`) has now.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(tool.clone());
        }
        let (family, _) = name.split_once('.')?;
        self.sources
            .iter()
            .filter(|source| source.name() == family)
            .flat_map(|source| source.tools())
            .find(|tool| tool.name() == name)
    }

    /// Every tool, built-in and from sources, sorted by name.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = self.tools.values().cloned().collect();
        for source in &self.sources {
            tools.extend(
                source
                    .tools()
                    .into_iter()
                    .filter(|tool| !self.tools.contains_key(tool.name())),
            );
        }
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools.dedup_by(|a, b| a.name() == b.name());
        tools
    }

    /// Every tool's name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools()
            .iter()
            .map(|tool| tool.name().to_owned())
            .collect()
    }

    /// The sources, in the order they were added.
    pub fn sources(&self) -> &[Arc<dyn ToolSource>] {
        &self.sources
    }

    /// Whether `pattern` (an `enabled` glob) can name tools of a source
    /// even before it listed them: its first part is a source's name.
    pub(crate) fn source_covers(&self, pattern: &str) -> bool {
        let family = pattern.split('.').next().unwrap_or(pattern);
        self.sources.iter().any(|source| source.name() == family)
    }

    /// Gets ready the sources whose tools `policy` may allow
    /// ([`ToolSource::prepare`]), all at once.
    pub async fn prepare(&self, policy: &ToolPolicy) {
        let wanted = self
            .sources
            .iter()
            .filter(|source| policy.may_allow_family(source.name()));
        futures::future::join_all(wanted.map(|source| source.prepare())).await;
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.sources.iter().all(|s| s.tools().is_empty())
    }

    /// Shuts every tool and source down (kills background processes,
    /// stops servers, closes connections); for the end of the process.
    pub async fn shutdown(&self) {
        for tool in self.tools.values() {
            tool.shutdown().await;
        }
        futures::future::join_all(self.sources.iter().map(|source| source.shutdown())).await;
    }

    /// Every tool's spec, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools()
            .iter()
            .map(|tool| spec(tool.as_ref()))
            .collect()
    }

    /// The specs of the tools `policy` allows, sorted by name: what one
    /// agent's model is offered.
    pub fn specs_for(&self, policy: &ToolPolicy) -> Vec<ToolSpec> {
        self.tools()
            .iter()
            .filter(|tool| policy.permits(tool.as_ref()))
            .map(|tool| spec(tool.as_ref()))
            .collect()
    }

    /// The tool list in Anthropic's Messages format, names mapped for the wire.
    pub fn to_anthropic(&self) -> Value {
        let specs = self.specs();
        let names = ToolNameMap::new(&specs);
        Value::Array(
            specs
                .iter()
                .map(|s| {
                    json!({
                        "name": names.to_wire(&s.name),
                        "description": s.description,
                        "input_schema": s.input_schema,
                    })
                })
                .collect(),
        )
    }

    /// The tool list in OpenAI's Chat Completions format, names mapped for the wire.
    pub fn to_openai(&self) -> Value {
        let specs = self.specs();
        let names = ToolNameMap::new(&specs);
        Value::Array(
            specs
                .iter()
                .map(|s| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": names.to_wire(&s.name),
                            "description": s.description,
                            "parameters": s.input_schema,
                        }
                    })
                })
                .collect(),
        )
    }
}

pub(crate) fn spec(tool: &dyn Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name().to_owned(),
        description: tool.description().to_owned(),
        input_schema: tool.input_schema(),
    }
}
