use flynn_core::config::{self, ProcessEnv};
use flynn_core::protocol::{ContentBlock, Role};
use std::sync::Arc;

use flynn_core::{SessionKey, SessionStore};
use serde_json::json;

use crate::cli::{SessionsArgs, SessionsCommand, UsageArgs};
use crate::exit::Failure;

/// Opens the session store the config points at.
async fn open_store(
    config_file: Option<&std::path::Path>,
) -> Result<Arc<dyn SessionStore>, Failure> {
    let loaded = config::load(config_file, &ProcessEnv)?;
    flynn_core::sessions::open(&loaded.config.sessions, &loaded.paths.home)
        .await
        .map_err(storage_error)
}

pub async fn run(args: SessionsArgs) -> Result<(), Failure> {
    let store = open_store(args.config.as_deref()).await?;
    match args.command {
        SessionsCommand::List { json } => list(&store, json).await,
        SessionsCommand::Show { key, json } => show(&store, &parse_key(&key)?, json).await,
        SessionsCommand::Reset { key, json } => {
            let key = parse_key(&key)?;
            let existed = store.clear(&key).await.map_err(storage_error)?;
            if json {
                outln!("{}", json!({"session": key.as_str(), "reset": existed}));
            } else if existed {
                outln!("reset {key}");
            } else {
                outln!("no session {key}");
            }
            Ok(())
        }
    }
}

fn parse_key(key: &str) -> Result<SessionKey, Failure> {
    key.parse()
        .map_err(|e: flynn_core::protocol::SessionKeyError| Failure::usage(e.to_string()))
}

fn storage_error(error: flynn_core::SessionsError) -> Failure {
    Failure::other(error.to_string())
}

async fn list(store: &Arc<dyn SessionStore>, json: bool) -> Result<(), Failure> {
    let sessions = store.list().await.map_err(storage_error)?;
    if json {
        let out: Vec<_> = sessions
            .iter()
            .map(|s| {
                json!({
                    "session": s.key.as_str(),
                    "messages": s.message_count,
                    "created_at": timestamp(s.created_at),
                    "updated_at": timestamp(s.updated_at),
                })
            })
            .collect();
        outln!("{}", serde_json::Value::Array(out));
        return Ok(());
    }
    if sessions.is_empty() {
        outln!("no sessions yet");
        return Ok(());
    }
    let width = sessions
        .iter()
        .map(|s| s.key.as_str().len())
        .max()
        .unwrap_or(0)
        .max(7);
    outln!("{:<width$}  {:>8}  UPDATED", "SESSION", "MESSAGES");
    for s in &sessions {
        outln!(
            "{:<width$}  {:>8}  {}",
            s.key.as_str(),
            s.message_count,
            timestamp(s.updated_at)
        );
    }
    Ok(())
}

async fn show(store: &Arc<dyn SessionStore>, key: &SessionKey, json: bool) -> Result<(), Failure> {
    let history: Vec<flynn_core::Message> = store
        .history(key)
        .await
        .map_err(storage_error)?
        .into_iter()
        .map(|stored| stored.message)
        .collect();
    if json {
        outln!("{}", json!({"session": key.as_str(), "messages": history}));
        return Ok(());
    }
    if history.is_empty() {
        return Err(Failure::other(format!("no session {key}")));
    }
    for message in &history {
        let who = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => outln!("{who}: {text}"),
                ContentBlock::ToolUse { name, input, .. } => outln!("{who}: → {name} {input}"),
                ContentBlock::ToolResult {
                    content, is_error, ..
                } => {
                    let mark = if *is_error { "✗" } else { "✓" };
                    let first = content.lines().next().unwrap_or_default();
                    outln!("{who}: {mark} {first}");
                }
                ContentBlock::Image { .. } => outln!("{who}: [image]"),
                ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {}
            }
        }
    }
    Ok(())
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ`.
fn timestamp(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

pub async fn usage(args: UsageArgs) -> Result<(), Failure> {
    let session = args.session.as_deref().map(parse_key).transpose()?;
    let store = open_store(args.config.as_deref()).await?;
    let totals = store
        .usage_by_tier(session.as_ref())
        .await
        .map_err(storage_error)?;
    let lines = store
        .usage_by_purpose(session.as_ref())
        .await
        .map_err(storage_error)?;
    let total_json = |total: &flynn_core::sessions::UsageTotal| {
        json!({
            "calls": total.calls,
            "input_tokens": total.usage.input_tokens,
            "output_tokens": total.usage.output_tokens,
            "cache_read_tokens": total.usage.cache_read_tokens,
            "cache_write_tokens": total.usage.cache_write_tokens,
            "cost_usd": total.cost_usd,
            "unpriced_calls": total.unpriced_calls,
        })
    };
    if args.json {
        let tiers: serde_json::Map<String, serde_json::Value> = totals
            .iter()
            .map(|(tier, total)| (tier.to_string(), total_json(total)))
            .collect();
        let purposes: Vec<serde_json::Value> = lines
            .iter()
            .map(|line| {
                let mut value = total_json(&line.total);
                value["tier"] = json!(line.tier.as_str());
                value["purpose"] = json!(line.purpose.as_str());
                value
            })
            .collect();
        let mut out = json!({ "tiers": tiers, "purposes": purposes });
        if let Some(session) = &session {
            out["session"] = json!(session.as_str());
        }
        outln!("{out}");
        return Ok(());
    }
    if lines.is_empty() {
        outln!("no model calls recorded yet");
        return Ok(());
    }
    outln!(
        "{:<8} {:<18} {:>6} {:>12} {:>12} {:>12}",
        "TIER",
        "PURPOSE",
        "CALLS",
        "INPUT",
        "OUTPUT",
        "COST (USD)"
    );
    let mut sum = 0.0;
    let mut unpriced = 0;
    for line in &lines {
        let total = &line.total;
        sum += total.cost_usd;
        unpriced += total.unpriced_calls;
        outln!(
            "{:<8} {:<18} {:>6} {:>12} {:>12} {:>12.4}",
            line.tier.as_str(),
            line.purpose.as_str(),
            total.calls,
            total.usage.input_tokens,
            total.usage.output_tokens,
            total.cost_usd
        );
    }
    outln!(
        "{:<8} {:<18} {:>6} {:>12} {:>12} {:>12.4}",
        "total",
        "",
        "",
        "",
        "",
        sum
    );
    if unpriced > 0 {
        outln!("({unpriced} call(s) with no known price are not in the cost; set models.prices)");
    }
    Ok(())
}
