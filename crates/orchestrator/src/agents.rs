//! Named agents and the rules that pick one for a message.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flynn_protocol::config::{
    AgentConfig, AgentsConfig, MAIN_AGENT, ModelRef, ToolPolicyConfig, ToolProfile, ToolsConfig,
};
use flynn_protocol::{SessionKey, Tier};
use flynn_tools::ToolPolicy;
use wildmatch::WildMatch;

use crate::prompt::{DEFAULT_SYSTEM_PROMPT, PromptBuilder, PromptSlot};
use crate::{Error, Result};

/// One agent as a turn uses it: its model choice, tools, prompt and
/// workspace.
#[derive(Debug, Clone)]
pub struct AgentProfile {
    pub name: String,
    /// Tier used when neither the message nor the session picks one.
    pub tier: Tier,
    /// One model, with no fallback; wins over `tier`.
    pub model: Option<ModelRef>,
    pub policy: Arc<ToolPolicy>,
    /// The policy when the turn's model is from one of these providers
    /// (`tools.providers`), applied after the agent's own.
    pub provider_policies: BTreeMap<String, Arc<ToolPolicy>>,
    pub prompt: PromptBuilder,
    /// Model calls per turn before stopping with a partial answer.
    pub max_iterations: u32,
    /// What a guest may pick with `/model` (tiers and `provider/model`).
    pub models: Vec<String>,
    /// Other agents this one may start or message.
    pub can_delegate: Vec<String>,
    /// The tools a guest's turn may use (`guest_tools`, the agent's else
    /// `agents.guest_tools`); the `messaging` profile when `None`.
    pub guest_tools: Option<ToolPolicyConfig>,
}

impl AgentProfile {
    /// A profile from its config; `defaults` supplies what the agent leaves
    /// out.
    pub fn from_config(
        agent: &AgentConfig,
        defaults: &AgentsConfig,
        tools: &ToolsConfig,
        workspace: &Path,
    ) -> Self {
        let workspace: PathBuf = agent
            .workspace
            .clone()
            .unwrap_or_else(|| workspace.to_path_buf());
        let base = agent
            .system_prompt
            .clone()
            .or_else(|| defaults.system_prompt.clone())
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned());
        AgentProfile {
            name: agent.name.clone(),
            tier: agent.tier.unwrap_or(defaults.primary_tier),
            model: agent.model.clone(),
            policy: Arc::new(ToolPolicy::new(tools, agent.tools.as_ref())),
            provider_policies: tools
                .providers
                .iter()
                .map(|(provider, layer)| {
                    let layers = agent.tools.iter().chain(std::iter::once(layer));
                    (
                        provider.clone(),
                        Arc::new(ToolPolicy::layered(tools, layers)),
                    )
                })
                .collect(),
            prompt: PromptBuilder::new(base, agent.prompt_files.clone(), workspace),
            max_iterations: agent.max_iterations.unwrap_or(defaults.max_iterations),
            models: agent.models.clone(),
            can_delegate: agent.can_delegate.clone(),
            guest_tools: agent
                .guest_tools
                .clone()
                .or_else(|| defaults.guest_tools.clone()),
        }
    }

    /// Whether this agent may start or message `other` (itself always).
    pub fn may_delegate_to(&self, other: &str) -> bool {
        other == self.name || self.can_delegate.iter().any(|name| name == other)
    }

    /// The policy a guest's turn gets: the agent's (for `provider`),
    /// within the guest restriction (`guest_tools` of the channel, else
    /// the agent's, else the `messaging` profile).
    pub fn guest_policy(
        &self,
        provider: Option<&str>,
        channel_tools: Option<&ToolPolicyConfig>,
    ) -> ToolPolicy {
        let restriction = ToolPolicy::restriction(
            channel_tools.or(self.guest_tools.as_ref()),
            ToolProfile::Messaging,
        );
        self.policy_for(provider).within(&restriction)
    }

    /// The policy for a turn whose model comes from `provider`.
    pub fn policy_for(&self, provider: Option<&str>) -> &Arc<ToolPolicy> {
        provider
            .and_then(|provider| self.provider_policies.get(provider))
            .unwrap_or(&self.policy)
    }

    pub fn workspace(&self) -> &Path {
        self.prompt.workspace()
    }
}

#[derive(Debug, Clone)]
struct Route {
    channel: WildMatch,
    sender: WildMatch,
    agent: String,
}

/// Every agent of a runtime, and the routing rules between them.
#[derive(Debug, Clone)]
pub struct Agents {
    by_name: BTreeMap<String, Arc<AgentProfile>>,
    default: String,
    routes: Vec<Route>,
}

impl Agents {
    /// The agents of `agents.list` (or the built-in `main` agent when the
    /// list is empty), with `workspace` for those that name none.
    pub fn from_config(
        config: &AgentsConfig,
        tools: &ToolsConfig,
        workspace: &Path,
    ) -> Result<Self> {
        let list: Vec<AgentConfig> = if config.list.is_empty() {
            vec![AgentConfig::new(MAIN_AGENT)]
        } else {
            config.list.clone()
        };
        let mut by_name = BTreeMap::new();
        for agent in &list {
            let profile = AgentProfile::from_config(agent, config, tools, workspace);
            if by_name
                .insert(agent.name.clone(), Arc::new(profile))
                .is_some()
            {
                return Err(Error::Config(format!(
                    "agents.list: the agent name '{}' is used twice (names must be unique)",
                    agent.name
                )));
            }
        }
        let default = match &config.default {
            Some(name) => name.clone(),
            None => list
                .first()
                .map_or_else(|| MAIN_AGENT.to_owned(), |a| a.name.clone()),
        };
        let agents = Agents {
            by_name,
            default,
            routes: Vec::new(),
        };
        agents.require(&agents.default, "agents.default")?;
        let mut routes = Vec::with_capacity(config.routes.len());
        for (i, route) in config.routes.iter().enumerate() {
            agents.require(&route.agent, &format!("agents.routes[{i}].agent"))?;
            routes.push(Route {
                channel: WildMatch::new(&route.channel),
                sender: WildMatch::new(&route.sender),
                agent: route.agent.clone(),
            });
        }
        Ok(Agents { routes, ..agents })
    }

    /// Agents built by hand (embedders, tests); the first is the default.
    pub fn new(profiles: Vec<AgentProfile>) -> Result<Self> {
        let Some(first) = profiles.first() else {
            return Err(Error::Config("at least one agent is needed".to_owned()));
        };
        let default = first.name.clone();
        let mut by_name = BTreeMap::new();
        for profile in profiles {
            by_name.insert(profile.name.clone(), Arc::new(profile));
        }
        Ok(Agents {
            by_name,
            default,
            routes: Vec::new(),
        })
    }

    fn require(&self, name: &str, context: &str) -> Result<()> {
        self.lookup(name, context).map(|_| ())
    }

    /// Adds a prompt slot (memory, skills) to every agent.
    pub fn add_slot(&mut self, slot: Arc<dyn PromptSlot>) {
        for profile in self.by_name.values_mut() {
            let mut updated = (**profile).clone();
            updated.prompt = updated.prompt.slot(slot.clone());
            *profile = Arc::new(updated);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<AgentProfile>> {
        self.by_name.get(name)
    }

    /// The agent called `name`, or an error naming the agents there are.
    pub fn lookup(&self, name: &str, context: &str) -> Result<&Arc<AgentProfile>> {
        self.by_name.get(name).ok_or_else(|| Error::UnknownAgent {
            name: name.to_owned(),
            available: self.names().collect::<Vec<_>>().join(", "),
            context: context.to_owned(),
        })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub fn default_agent(&self) -> &Arc<AgentProfile> {
        // `from_config` and `new` check that the default exists.
        self.by_name
            .get(&self.default)
            .or_else(|| self.by_name.values().next())
            .unwrap_or_else(|| unreachable!("an Agents value always has an agent"))
    }

    /// The agent a route names for a message from `sender` (the
    /// platform's user id) on `channel`, when a route with a sender glob
    /// other than `*` matches it. Routes match the session key's peer too
    /// ([`route`](Self::route)); in a group that is the chat, so this is
    /// how a rule picks an agent for one person there.
    pub fn route_sender(&self, channel: &str, sender: &str) -> Option<&str> {
        self.routes
            .iter()
            .find(|route| {
                route.channel.matches(channel)
                    && route.sender != "*"
                    && route.sender.matches(sender)
            })
            .map(|route| route.agent.as_str())
    }

    /// The agents a guest `sender` on `channel` may switch to in session
    /// `key` with `/agent`: the one the routes pick for the session, and
    /// every agent a route sends this sender (or this chat) to.
    pub fn reachable_by(&self, channel: &str, sender: &str, key: &SessionKey) -> Vec<&str> {
        let mut names = vec![self.route(key).name.as_str()];
        for route in &self.routes {
            if route.channel.matches(channel)
                && (route.sender.matches(sender) || route.sender.matches(key.peer()))
                && !names.contains(&route.agent.as_str())
                && self.by_name.contains_key(&route.agent)
            {
                names.push(route.agent.as_str());
            }
        }
        names
    }

    /// The agent for a message on `key`: the first route whose channel and
    /// sender globs match, else the default agent.
    pub fn route(&self, key: &SessionKey) -> &Arc<AgentProfile> {
        self.routes
            .iter()
            .find(|route| route.channel.matches(key.channel()) && route.sender.matches(key.peer()))
            .and_then(|route| self.by_name.get(&route.agent))
            .unwrap_or_else(|| self.default_agent())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flynn_protocol::config::AgentRoute;

    fn config() -> AgentsConfig {
        let mut coder = AgentConfig::new("coder");
        coder.tier = Some(Tier::Complex);
        AgentsConfig {
            list: vec![AgentConfig::new("chat"), coder],
            routes: vec![
                AgentRoute {
                    channel: "cli".into(),
                    sender: "*".into(),
                    agent: "coder".into(),
                },
                AgentRoute {
                    channel: "tele*".into(),
                    sender: "42".into(),
                    agent: "coder".into(),
                },
            ],
            ..AgentsConfig::default()
        }
    }

    fn routed(agents: &Agents, key: &str) -> String {
        agents
            .route(&key.parse().unwrap_or_else(|_| unreachable!()))
            .name
            .clone()
    }

    #[test]
    fn routes_match_channel_and_sender_globs_first_match_wins() {
        let agents = Agents::from_config(&config(), &ToolsConfig::default(), Path::new("/w"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(routed(&agents, "cli:default"), "coder");
        assert_eq!(routed(&agents, "telegram:42"), "coder");
        assert_eq!(routed(&agents, "telegram:7"), "chat");
        assert_eq!(routed(&agents, "slack:42"), "chat");
        assert_eq!(agents.get("coder").map(|a| a.tier), Some(Tier::Complex));
        assert_eq!(agents.get("chat").map(|a| a.tier), Some(Tier::Default));
    }

    #[test]
    fn an_unknown_default_or_route_agent_is_refused_with_the_names_there_are() {
        let mut bad = config();
        bad.routes[1].agent = "codr".into();
        assert_eq!(
            Agents::from_config(&bad, &ToolsConfig::default(), Path::new("/w"))
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err("agents.routes[1].agent: unknown agent 'codr' (agents: chat, coder)".to_owned())
        );
    }

    #[test]
    fn an_empty_list_is_the_main_agent_with_the_top_level_settings() {
        let config = AgentsConfig {
            primary_tier: Tier::Fast,
            system_prompt: Some("Be brief.".into()),
            ..AgentsConfig::default()
        };
        let agents = Agents::from_config(&config, &ToolsConfig::default(), Path::new("/w"))
            .unwrap_or_else(|e| panic!("{e}"));
        let main = agents.default_agent();
        assert_eq!(
            (main.name.as_str(), main.tier, main.workspace()),
            ("main", Tier::Fast, Path::new("/w"))
        );
        assert_eq!(routed(&agents, "telegram:1"), "main");
    }
}
