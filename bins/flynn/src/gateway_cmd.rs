//! `flynn gateway status`: whether a daemon answers, and what it is doing
//! (health, turns, chat channels, cluster nodes).

use flynn_api::methods::{AgentStatus, ChannelsStatus, ClusterStatus, SystemHealth};
use flynn_api::{NoParams, StatusParams};
use flynn_core::config;
use serde_json::json;

use crate::cli::{GatewayArgs, GatewayCommand};
use crate::env::CliEnv;
use crate::exit::Failure;
use crate::remote;

pub async fn run(args: GatewayArgs) -> Result<(), Failure> {
    let GatewayCommand::Status { json } = args.command;
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let bind = &loaded.config.gateway.bind;
    let url = args
        .gateway
        .clone()
        .or_else(|| std::env::var("FLYNN_GATEWAY_URL").ok())
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| match bind.rsplit_once(':') {
            Some(("0.0.0.0" | "[::]" | "::", port)) => format!("http://127.0.0.1:{port}"),
            _ => format!("http://{bind}"),
        });
    let Some(target) = remote::target(Some(&url), args.config.as_deref())? else {
        return Err(Failure::usage("give the daemon's address with --gateway"));
    };
    let client = remote::connect(&target).await.map_err(|failure| Failure {
        code: failure.code,
        message: format!(
            "{}; start the daemon with `flynn start` (or flynn-daemon)",
            failure.message
        ),
    })?;
    let health = remote::call::<SystemHealth>(&target, &client, &NoParams {}).await?;
    let status =
        remote::call::<AgentStatus>(&target, &client, &StatusParams { session: None }).await?;
    let channels = remote::call::<ChannelsStatus>(&target, &client, &NoParams {}).await?;
    let cluster = remote::call::<ClusterStatus>(&target, &client, &NoParams {})
        .await
        .ok();
    let waiting = status.open_turns.len().saturating_sub(status.running.len());
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "url": url,
                "health": health,
                "status": status,
                "channels": channels,
                "cluster": cluster,
            }))
            .unwrap_or_default()
        );
        return Ok(());
    }
    let up = health.uptime_secs;
    println!(
        "Daemon {} at {url}: {}, up {}",
        health.version,
        health.status,
        if up >= 3600 {
            format!("{}h {:02}m", up / 3600, up / 60 % 60)
        } else {
            format!("{}m {:02}s", up / 60, up % 60)
        }
    );
    println!(
        "Sessions: {} active · turns: {} running, {waiting} waiting · {} confirmation(s) waiting{}",
        status.active_sessions,
        status.running.len(),
        health.pending_confirmations,
        if status.draining { " · draining" } else { "" }
    );
    if channels.is_empty() {
        println!("Channels: none");
    } else {
        let shown: Vec<String> = channels
            .iter()
            .map(|c| match &c.last_error {
                Some(error) if c.state != "connected" => {
                    format!("{} {} ({error})", c.name, c.state)
                }
                _ => format!("{} {}", c.name, c.state),
            })
            .collect();
        println!("Channels: {}", shown.join(", "));
    }
    if let Some(cluster) = cluster.filter(|c| !c.nodes.is_empty()) {
        let alive = cluster.nodes.iter().filter(|n| n.alive).count();
        println!("Cluster: {alive} of {} node(s) alive", cluster.nodes.len());
        for node in &cluster.nodes {
            println!(
                "  {}{} · {} · {} session(s){}",
                node.id,
                if cluster.this_node.as_deref() == Some(node.id.as_str()) {
                    " (this one)"
                } else {
                    ""
                },
                if node.alive { "alive" } else { "silent" },
                node.sessions,
                if node.roles.is_empty() {
                    String::new()
                } else {
                    format!(" · {}", node.roles.join(", "))
                }
            );
        }
    }
    Ok(())
}
