//! Agents: the main one's defaults, named agents, routing, delegation and sub-agents.

use super::*;

/// The agents: the main one's defaults, named agents, and which agent
/// answers which channel and sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// Tier for the main conversation (and for named agents that set
    /// neither `tier` nor `model`).
    #[serde(default)]
    pub primary_tier: Tier,
    /// Model calls per turn before Flynn stops with a partial answer.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Replaces the built-in system prompt (of agents that set none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The agent that answers when no route matches; the first of `list`
    /// when absent, or the built-in `main` agent when `list` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Named agents sharing one model router and one session store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<AgentConfig>,
    /// Which agent answers a message, by channel and sender; the first
    /// matching rule wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<AgentRoute>,
    /// Which tier does each kind of background work.
    #[serde(default)]
    pub delegation: DelegationConfig,
    /// A turn that reaches `max_iterations` goes on once on the
    /// `delegation.complex_reasoning` tier, and the user is told.
    #[serde(default)]
    pub auto_escalate: bool,
    /// How deep delegation may nest: a sub-agent's sub-agent is depth 2.
    #[serde(default = "default_max_delegation_depth")]
    pub max_delegation_depth: u32,
    /// Sub-agents started with the `agents.spawn` tool.
    #[serde(default)]
    pub subagents: SubagentsConfig,
    /// Which sessions the `sessions.*` tools may see and message. A
    /// guest's turn sees only its own session, whatever this says.
    #[serde(default)]
    pub session_access: SessionAccess,
    /// The tools a guest's turn may use (a paired or allowlisted chat
    /// sender, anyone in an open DM), within the agent's own; the
    /// `messaging` profile when absent. A channel's or an agent's
    /// `guest_tools` wins over this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_tools: Option<ToolPolicyConfig>,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            primary_tier: Tier::Default,
            max_iterations: default_max_iterations(),
            system_prompt: None,
            default: None,
            list: Vec::new(),
            routes: Vec::new(),
            delegation: DelegationConfig::default(),
            auto_escalate: false,
            max_delegation_depth: default_max_delegation_depth(),
            subagents: SubagentsConfig::default(),
            session_access: SessionAccess::default(),
            guest_tools: None,
        }
    }
}

fn default_max_delegation_depth() -> u32 {
    3
}

/// The tier each kind of background work runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegationConfig {
    /// Summaries of older messages.
    #[serde(default = "fast")]
    pub compaction: Tier,
    /// Facts worth remembering, taken from a conversation.
    #[serde(default = "fast")]
    pub memory_extraction: Tier,
    /// Short labelling tasks.
    #[serde(default = "fast")]
    pub classification: Tier,
    /// Condensing long tool output (`tools.summarise_over_bytes`).
    #[serde(default = "fast")]
    pub tool_summarisation: Tier,
    /// Where an escalated turn goes on (`agents.auto_escalate`), and
    /// sub-agents that ask for hard reasoning.
    #[serde(default = "complex")]
    pub complex_reasoning: Tier,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig {
            compaction: Tier::Fast,
            memory_extraction: Tier::Fast,
            classification: Tier::Fast,
            tool_summarisation: Tier::Fast,
            complex_reasoning: Tier::Complex,
        }
    }
}

impl DelegationConfig {
    /// The tier configured for `purpose`; a conversation or a sub-agent
    /// has no configured tier.
    pub fn tier_for(&self, purpose: crate::Purpose) -> Option<Tier> {
        use crate::Purpose;
        match purpose {
            Purpose::Compaction => Some(self.compaction),
            Purpose::MemoryExtraction => Some(self.memory_extraction),
            Purpose::Classification => Some(self.classification),
            Purpose::ToolSummarisation => Some(self.tool_summarisation),
            Purpose::ComplexReasoning => Some(self.complex_reasoning),
            Purpose::Conversation | Purpose::Subagent => None,
        }
    }
}

fn fast() -> Tier {
    Tier::Fast
}

fn complex() -> Tier {
    Tier::Complex
}

/// Limits on sub-agents (`agents.spawn`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentsConfig {
    /// Sub-agents running at once, across every session; a spawn beyond it
    /// waits for one to finish.
    #[serde(default = "default_subagent_concurrency")]
    pub max_concurrent: u32,
    /// Seconds a sub-agent may run before it is cancelled.
    #[serde(default = "default_subagent_timeout")]
    pub timeout_secs: u64,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        SubagentsConfig {
            max_concurrent: default_subagent_concurrency(),
            timeout_secs: default_subagent_timeout(),
        }
    }
}

fn default_subagent_concurrency() -> u32 {
    4
}

fn default_subagent_timeout() -> u64 {
    300
}

/// Which sessions an agent's `sessions.*` tools reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionAccess {
    /// Sessions answered by the same agent.
    #[default]
    Agent,
    /// Every session.
    All,
}

/// Name of the agent Flynn builds when `agents.list` is empty.
pub const MAIN_AGENT: &str = "main";

/// One named agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Letters, digits, `-` and `_`; what `/agent <name>`, `--agent` and
    /// routes use.
    pub name: String,
    /// Model tier; `agents.primary_tier` when neither this nor `model` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// One model as `provider/model`, with no fallback; wins over `tier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// Which tools this agent may use; the `tools` block's policy when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolPolicyConfig>,
    /// The agent's base prompt; `agents.system_prompt`, else the built-in
    /// prompt, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Files of the workspace added to the prompt on every turn, when they
    /// exist.
    #[serde(default = "default_prompt_files")]
    pub prompt_files: Vec<String>,
    /// Directory its tools start in and its prompt files are read from;
    /// `tools.workspace`, else the current directory, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Overrides `agents.max_iterations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// What a guest may pick with `/model`: tiers (`fast`) and models
    /// (`provider/model`). Empty: guests keep the agent's choice. The
    /// owner may pick any tier or model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Other agents this one may start (`agents.spawn`) or message
    /// (`sessions.send`); it may always delegate to itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub can_delegate: Vec<String>,
    /// The tools a guest's turn may use with this agent (within its own
    /// `tools`); `agents.guest_tools`, else the `messaging` profile, when
    /// absent. A channel's `guest_tools` wins over this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_tools: Option<ToolPolicyConfig>,
}

impl AgentConfig {
    pub fn new(name: impl Into<String>) -> Self {
        AgentConfig {
            name: name.into(),
            tier: None,
            model: None,
            tools: None,
            system_prompt: None,
            prompt_files: default_prompt_files(),
            workspace: None,
            max_iterations: None,
            models: Vec::new(),
            can_delegate: Vec::new(),
            guest_tools: None,
        }
    }
}

/// The workspace files read into every prompt by default.
pub fn default_prompt_files() -> Vec<String> {
    vec!["SOUL.md".to_owned(), "AGENTS.md".to_owned()]
}

/// Sends messages from matching channels and senders to one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentRoute {
    /// Channel name glob (`telegram`, `slack*`); any channel when absent.
    #[serde(default = "any_glob")]
    pub channel: String,
    /// Sender (peer) glob (`12345`, `team-*`); any sender when absent.
    #[serde(default = "any_glob")]
    pub sender: String,
    /// The agent's name, from `agents.list`.
    pub agent: String,
}

fn any_glob() -> String {
    "*".to_owned()
}
