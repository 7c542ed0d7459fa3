use std::collections::BTreeMap;
use std::sync::Arc;

use flynn_protocol::{ToolNameMap, ToolSpec};
use serde_json::{Value, json};

use crate::{Tool, ToolPolicy, TypedTool};

/// The tools offered to the model, by dotted name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
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

    /// Adds an already type-erased tool (MCP bridges, user tools).
    pub fn register_dyn(&mut self, tool: Arc<dyn Tool>) -> &mut Self {
        self.tools.insert(tool.name().to_owned(), tool);
        self
    }

    /// Keeps only the named tools. Returns the names that matched nothing.
    pub fn retain(&mut self, names: &[String]) -> Vec<String> {
        let unknown = names
            .iter()
            .filter(|n| !self.tools.contains_key(n.as_str()))
            .cloned()
            .collect();
        self.tools.retain(|name, _| names.contains(name));
        unknown
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every tool, sorted by name.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Shuts every tool down (kills background processes, closes
    /// connections); for the end of the process.
    pub async fn shutdown(&self) {
        for tool in self.tools.values() {
            tool.shutdown().await;
        }
    }

    /// Every tool's spec, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|tool| spec(tool.as_ref()))
            .collect()
    }

    /// The specs of the tools `policy` allows, sorted by name: what one
    /// agent's model is offered.
    pub fn specs_for(&self, policy: &ToolPolicy) -> Vec<ToolSpec> {
        self.tools
            .values()
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
