//! `flynn agent list|show`: the agents the config defines, with what each
//! one runs on (tier or model), may use (tools, autonomy), works in and is
//! routed from. Read from the config file; no daemon needed.

use flynn_core::config;
use flynn_core::protocol::config::{AgentConfig, FlynnConfig, MAIN_AGENT};
use serde_json::{Value, json};

use crate::cli::{AgentArgs, AgentCommand};
use crate::env::CliEnv;
use crate::exit::Failure;

pub fn run(args: AgentArgs) -> Result<(), Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let config = &loaded.config;
    match args.command {
        AgentCommand::List { json } => {
            let agents: Vec<Value> = agents(config).iter().map(|a| describe(config, a)).collect();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&agents).unwrap_or_default()
                );
                return Ok(());
            }
            for agent in &agents {
                println!(
                    "{}{} · {} · tools: {} ({})",
                    agent["name"].as_str().unwrap_or_default(),
                    if agent["default"] == true {
                        " (default)"
                    } else {
                        ""
                    },
                    agent["runs_on"].as_str().unwrap_or_default(),
                    agent["tools"]["profile"].as_str().unwrap_or_default(),
                    agent["tools"]["autonomy"].as_str().unwrap_or_default(),
                );
            }
            Ok(())
        }
        AgentCommand::Show { name, json } => {
            let all = agents(config);
            let Some(agent) = all.iter().find(|a| a.name == name) else {
                let names: Vec<&str> = all.iter().map(|a| a.name.as_str()).collect();
                return Err(Failure::usage(format!(
                    "no agent named '{name}' (agents: {})",
                    names.join(", ")
                )));
            };
            let described = describe(config, agent);
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&described).unwrap_or_default()
                );
                return Ok(());
            }
            print_details(&described);
            Ok(())
        }
    }
}

/// The agents as the runtime has them: `agents.list`, or the one `main`.
fn agents(config: &FlynnConfig) -> Vec<AgentConfig> {
    if config.agents.list.is_empty() {
        vec![AgentConfig::new(MAIN_AGENT)]
    } else {
        config.agents.list.clone()
    }
}

fn text<T: serde::Serialize>(value: T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn describe(config: &FlynnConfig, agent: &AgentConfig) -> Value {
    let default = config
        .agents
        .default
        .clone()
        .unwrap_or_else(|| agents(config)[0].name.clone());
    let runs_on = match (&agent.model, agent.tier) {
        (Some(model), _) => format!("model {model} (no fallback)"),
        (None, Some(tier)) => format!("{tier} tier"),
        (None, None) => format!("{} tier (agents.primary_tier)", config.agents.primary_tier),
    };
    let tools = agent.tools.as_ref();
    let profile = tools
        .and_then(|t| t.profile)
        .unwrap_or(config.tools.profile);
    let autonomy = tools
        .and_then(|t| t.autonomy)
        .unwrap_or(config.tools.autonomy);
    let routes: Vec<Value> = config
        .agents
        .routes
        .iter()
        .filter(|r| r.agent == agent.name)
        .map(|r| json!({"channel": r.channel, "sender": r.sender}))
        .collect();
    json!({
        "name": agent.name,
        "default": agent.name == default,
        "runs_on": runs_on,
        "tools": {
            "profile": text(profile),
            "autonomy": text(autonomy),
            "enabled": tools.and_then(|t| t.enabled.clone()),
            "deny": tools.map(|t| t.deny.clone()).unwrap_or_default(),
        },
        "workspace": agent
            .workspace
            .clone()
            .or_else(|| config.tools.workspace.clone())
            .map(|p| p.display().to_string()),
        "max_iterations": agent.max_iterations.unwrap_or(config.agents.max_iterations),
        "system_prompt": agent
            .system_prompt
            .as_deref()
            .or(config.agents.system_prompt.as_deref())
            .map(|p| p.lines().next().unwrap_or_default().chars().take(80).collect::<String>()),
        "prompt_files": agent.prompt_files,
        "guest_models": agent.models,
        "can_delegate": agent.can_delegate,
        "routes": routes,
    })
}

fn print_details(agent: &Value) {
    let list = |value: &Value| {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "none".to_owned())
    };
    println!(
        "{}{}",
        agent["name"].as_str().unwrap_or_default(),
        if agent["default"] == true {
            " (the default agent)"
        } else {
            ""
        }
    );
    println!(
        "  runs on: {}",
        agent["runs_on"].as_str().unwrap_or_default()
    );
    println!(
        "  tools: {} profile, {} autonomy{}{}",
        agent["tools"]["profile"].as_str().unwrap_or_default(),
        agent["tools"]["autonomy"].as_str().unwrap_or_default(),
        match agent["tools"]["enabled"].as_array() {
            Some(_) => format!("; enabled: {}", list(&agent["tools"]["enabled"])),
            None => String::new(),
        },
        match agent["tools"]["deny"].as_array() {
            Some(deny) if !deny.is_empty() =>
                format!("; denied: {}", list(&agent["tools"]["deny"])),
            _ => String::new(),
        }
    );
    println!(
        "  workspace: {}",
        agent["workspace"]
            .as_str()
            .unwrap_or("the default workspace (FLYNN_HOME/workspace)")
    );
    println!("  max model calls per turn: {}", agent["max_iterations"]);
    if let Some(prompt) = agent["system_prompt"].as_str() {
        println!("  system prompt: {prompt}…");
    }
    println!("  prompt files: {}", list(&agent["prompt_files"]));
    println!("  guests may pick: {}", list(&agent["guest_models"]));
    println!("  may delegate to: {}", list(&agent["can_delegate"]));
    let routes: Vec<String> = agent["routes"]
        .as_array()
        .map(|routes| {
            routes
                .iter()
                .map(|r| {
                    format!(
                        "{}:{}",
                        r["channel"]
                            .as_str()
                            .filter(|c| !c.is_empty())
                            .unwrap_or("*"),
                        r["sender"]
                            .as_str()
                            .filter(|s| !s.is_empty())
                            .unwrap_or("*")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    println!(
        "  routed from: {}",
        if routes.is_empty() {
            "no route (the default agent answers what no route claims)".to_owned()
        } else {
            routes.join(", ")
        }
    );
}
