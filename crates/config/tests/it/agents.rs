//! Named agents, routes, the tool policy and the session settings: a file
//! using all of them loads with the values written.

use std::path::PathBuf;

use flynn_protocol::Tier;
use flynn_protocol::config::{
    AgentConfig, AgentRoute, AgentsConfig, HookAction, HookRule, InterruptedTurns, ModelRef,
    SessionsConfig, ToolPolicyConfig, ToolProfile, ToolsConfig,
};

use crate::parse;

#[test]
fn agents_routes_tool_policy_and_sessions_load_as_written() {
    let text = "\
providers:
  anthropic: {kind: anthropic}
agents:
  primary_tier: complex
  max_iterations: 12
  system_prompt: Be brief.
  default: chat
  list:
    - name: chat
      tier: fast
      tools:
        profile: messaging
        deny: [web.fetch]
    - name: coder
      model: anthropic/claude-opus-4-6
      tools:
        profile: coding
        enabled: [file.*, shell.exec]
      system_prompt: You write code.
      prompt_files: [CODING.md]
      workspace: /home/me/src
      max_iterations: 40
  routes:
    - channel: telegram
      sender: '12345'
      agent: coder
    - channel: slack*
      agent: chat
    - agent: chat
tools:
  profile: coding
  enabled: [file.*, shell.*, memory.*]
  deny: [process.*]
  hooks:
    - {tool: shell.*, action: confirm}
    - {tool: file.write, action: log}
    - {tool: '*', action: silent}
  confirm_timeout_secs: 60
sessions:
  url: sqlite:///var/lib/flynn/sessions.db
  interrupted_turns: rerun
  queue_limit: 8
  lane_idle_secs: 60
";
    let config = parse(text).unwrap();

    assert_eq!(
        config.agents,
        AgentsConfig {
            primary_tier: Tier::Complex,
            max_iterations: 12,
            system_prompt: Some("Be brief.".to_owned()),
            default: Some("chat".to_owned()),
            list: vec![
                AgentConfig {
                    tier: Some(Tier::Fast),
                    tools: Some(ToolPolicyConfig {
                        profile: Some(ToolProfile::Messaging),
                        enabled: None,
                        deny: vec!["web.fetch".to_owned()],
                        autonomy: None,
                        taint: None,
                    }),
                    ..AgentConfig::new("chat")
                },
                AgentConfig {
                    name: "coder".to_owned(),
                    tier: None,
                    model: Some(ModelRef::new("anthropic", "claude-opus-4-6")),
                    tools: Some(ToolPolicyConfig {
                        profile: Some(ToolProfile::Coding),
                        enabled: Some(vec!["file.*".to_owned(), "shell.exec".to_owned()]),
                        deny: Vec::new(),
                        autonomy: None,
                        taint: None,
                    }),
                    system_prompt: Some("You write code.".to_owned()),
                    prompt_files: vec!["CODING.md".to_owned()],
                    workspace: Some(PathBuf::from("/home/me/src")),
                    max_iterations: Some(40),
                    models: Vec::new(),
                    can_delegate: Vec::new(),
                    guest_tools: None,
                },
            ],
            routes: vec![
                AgentRoute {
                    channel: "telegram".to_owned(),
                    sender: "12345".to_owned(),
                    agent: "coder".to_owned(),
                },
                AgentRoute {
                    channel: "slack*".to_owned(),
                    sender: "*".to_owned(),
                    agent: "chat".to_owned(),
                },
                AgentRoute {
                    channel: "*".to_owned(),
                    sender: "*".to_owned(),
                    agent: "chat".to_owned(),
                },
            ],
            ..AgentsConfig::default()
        }
    );
    assert_eq!(
        config.tools,
        ToolsConfig {
            enabled: Some(vec![
                "file.*".to_owned(),
                "shell.*".to_owned(),
                "memory.*".to_owned()
            ]),
            profile: ToolProfile::Coding,
            deny: vec!["process.*".to_owned()],
            hooks: vec![
                HookRule {
                    tool: "shell.*".to_owned(),
                    action: HookAction::Confirm,
                },
                HookRule {
                    tool: "file.write".to_owned(),
                    action: HookAction::Log,
                },
                HookRule {
                    tool: "*".to_owned(),
                    action: HookAction::Silent,
                },
            ],
            confirm_timeout_secs: 60,
            ..ToolsConfig::default()
        }
    );
    assert_eq!(
        config.sessions,
        SessionsConfig {
            url: Some("sqlite:///var/lib/flynn/sessions.db".to_owned()),
            database: None,
            interrupted_turns: InterruptedTurns::Rerun,
            queue_limit: 8,
            lane_idle_secs: 60,
            retention_days: None,
        }
    );
}

#[test]
fn an_agent_takes_the_defaults_of_what_it_leaves_out() {
    let config = parse("agents:\n  list:\n    - name: main\n").unwrap();
    assert_eq!(
        config.agents,
        AgentsConfig {
            list: vec![AgentConfig::new("main")],
            ..AgentsConfig::default()
        }
    );
    assert_eq!(
        AgentConfig::new("main").prompt_files,
        ["SOUL.md", "AGENTS.md"]
    );
}

#[test]
fn main_is_the_agent_when_the_list_is_empty() {
    let config =
        parse("agents:\n  default: main\n  routes: [{channel: cli, agent: main}]\n").unwrap();
    assert_eq!(
        config.agents,
        AgentsConfig {
            default: Some("main".to_owned()),
            routes: vec![AgentRoute {
                channel: "cli".to_owned(),
                sender: "*".to_owned(),
                agent: "main".to_owned(),
            }],
            ..AgentsConfig::default()
        }
    );
}

#[test]
fn a_relative_sqlite_url_and_a_database_path_are_each_accepted() {
    for (text, url, database) in [
        (
            "sessions:\n  url: sqlite://sessions.db\n",
            Some("sqlite://sessions.db"),
            None,
        ),
        (
            "sessions:\n  database: /srv/flynn/sessions.db\n",
            None,
            Some("/srv/flynn/sessions.db"),
        ),
    ] {
        assert_eq!(
            parse(text).unwrap().sessions,
            SessionsConfig {
                url: url.map(str::to_owned),
                database: database.map(PathBuf::from),
                ..SessionsConfig::default()
            },
            "{text}"
        );
    }
}
