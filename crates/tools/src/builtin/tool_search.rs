use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::catalog::TOOL_SEARCH;
use crate::{ToolContext, ToolError, TypedTool};

/// `tools.search`: finds tools that are not offered with every request
/// (`tools.deferred`) and offers them for the rest of the turn.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolSearch;

/// Arguments of `tools.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSearchArgs {
    /// Keywords, e.g. "background process"; `*` lists all.
    query: String,
}

#[async_trait]
impl TypedTool for ToolSearch {
    type Args = ToolSearchArgs;

    fn name(&self) -> &str {
        TOOL_SEARCH
    }

    fn description(&self) -> &str {
        "Find more tools by keyword (e.g. memory, process, browser, send file, voice); found tools become callable."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: ToolSearchArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let Some(catalog) = &ctx.catalog else {
            return Err(ToolError::failed(
                "no tools are held back in this context; every tool you may use is already offered",
            ));
        };
        let hits = catalog.search(&args.query, 8);
        if hits.is_empty() {
            return Ok(format!(
                "No more tools match '{}'. Try other keywords, or `*` for all.",
                args.query
            ));
        }
        let mut out = String::from("Now available (call them directly, by these names):\n");
        for (name, description) in hits {
            let wire = flynn_protocol::wire_name(&name);
            out.push_str(&format!("- {wire}: {description}\n"));
        }
        Ok(out)
    }
}
