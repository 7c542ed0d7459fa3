//! `flynn sessions` and `flynn usage`: read from the session database,
//! or through a running daemon (`--gateway`, `FLYNN_GATEWAY_URL`) with the
//! same output.

use std::sync::Arc;

use flynn_core::config;

use crate::env::CliEnv;
use flynn_api::methods;
use flynn_client::Client;
use flynn_core::gateway::api::{
    HistoryParams, HistoryResult, NoParams, PurposeUsage, ResetResult, SessionParams,
    SessionSummary, UsageParams, UsageSummary, UsageTotals,
};
use flynn_core::gateway::convert;
use flynn_core::protocol::{ContentBlock, Principal, Role};
use flynn_core::{Message, SessionKey, SessionStore, Tier};
use serde_json::json;

use crate::cli::{SessionsArgs, SessionsCommand, UsageArgs};
use crate::exit::Failure;
use crate::remote::{self, Target};

/// Where sessions are read from.
enum Source {
    Local(Arc<dyn SessionStore>),
    Remote(Target, Client),
}

/// One line of `flynn sessions list`.
struct Row {
    key: SessionKey,
    messages: u64,
    created_at: i64,
    updated_at: i64,
    title: Option<String>,
}

/// Usage per tier and per (tier, purpose).
struct UsageLines {
    tiers: Vec<(Tier, UsageTotals)>,
    purposes: Vec<PurposeUsage>,
}

impl Source {
    async fn open(
        gateway: Option<&str>,
        config_file: Option<&std::path::Path>,
    ) -> Result<Self, Failure> {
        if let Some(target) = remote::target(gateway, config_file)? {
            let client = remote::connect(&target).await?;
            return Ok(Source::Remote(target, client));
        }
        let loaded = config::load(config_file, &CliEnv)?;
        let store = flynn_core::sessions::open(&loaded.config.sessions, &loaded.paths.home)
            .await
            .map_err(storage_error)?;
        Ok(Source::Local(store))
    }

    async fn list(&self) -> Result<Vec<Row>, Failure> {
        match self {
            Source::Local(store) => Ok(store
                .list()
                .await
                .map_err(storage_error)?
                .into_iter()
                .map(|s| Row {
                    key: s.key,
                    messages: s.message_count,
                    created_at: s.created_at,
                    updated_at: s.updated_at,
                    title: s.meta.title,
                })
                .collect()),
            Source::Remote(target, client) => {
                let sessions: Vec<SessionSummary> =
                    remote::call::<methods::SessionsList>(target, client, &NoParams {}).await?;
                Ok(sessions
                    .into_iter()
                    .map(|s| Row {
                        key: s.key,
                        messages: s.message_count,
                        created_at: s.created_at,
                        updated_at: s.updated_at,
                        title: s.title,
                    })
                    .collect())
            }
        }
    }

    /// The session's messages, each with who sent it (a person's message
    /// in a turn; `None` for the agent's).
    async fn history(
        &self,
        key: &SessionKey,
    ) -> Result<Vec<(Message, Option<Principal>)>, Failure> {
        match self {
            Source::Local(store) => Ok(store
                .history(key)
                .await
                .map_err(storage_error)?
                .into_iter()
                .map(|stored| (stored.message, stored.principal))
                .collect()),
            Source::Remote(target, client) => {
                // Page forward from the start until a page comes back empty.
                let mut messages = Vec::new();
                let mut after = 0;
                loop {
                    let params = HistoryParams {
                        session: key.clone(),
                        before: None,
                        after: Some(after),
                        limit: Some(1000),
                    };
                    let page: HistoryResult =
                        remote::call::<methods::SessionsHistory>(target, client, &params).await?;
                    let Some(cursor) = page.cursor.filter(|_| !page.messages.is_empty()) else {
                        break;
                    };
                    for entry in page.messages {
                        messages.push((entry.message, entry.principal));
                    }
                    after = cursor;
                }
                Ok(messages)
            }
        }
    }

    async fn reset(&self, key: &SessionKey) -> Result<bool, Failure> {
        match self {
            Source::Local(store) => {
                // Without the daemon's lane, a turn still open would keep
                // writing into the emptied session: refuse.
                let open = store.open_turns(Some(key)).await.map_err(storage_error)?;
                if !open.is_empty() {
                    return Err(Failure::from_code(
                        flynn_core::ErrorCode::Refused,
                        format!(
                            "session {key} has {} unfinished turns (a running daemon's, or left by one that stopped); reset it through the daemon with --gateway (or FLYNN_GATEWAY_URL), which stops them first, or start the daemon so it settles them",
                            open.len()
                        ),
                    ));
                }
                store.clear(key).await.map_err(storage_error)
            }
            Source::Remote(target, client) => {
                let params = SessionParams {
                    session: key.clone(),
                };
                let result: ResetResult =
                    remote::call::<methods::SessionsReset>(target, client, &params).await?;
                Ok(result.existed)
            }
        }
    }

    async fn usage(&self, session: Option<&SessionKey>) -> Result<UsageLines, Failure> {
        match self {
            Source::Local(store) => {
                let tiers = store.usage_by_tier(session).await.map_err(storage_error)?;
                let purposes = store
                    .usage_by_purpose(session)
                    .await
                    .map_err(storage_error)?;
                Ok(UsageLines {
                    tiers: tiers
                        .iter()
                        .map(|(tier, total)| (*tier, convert::totals(total)))
                        .collect(),
                    purposes: purposes
                        .iter()
                        .map(|line| PurposeUsage {
                            tier: line.tier,
                            purpose: line.purpose,
                            total: convert::totals(&line.total),
                        })
                        .collect(),
                })
            }
            Source::Remote(target, client) => {
                let params = UsageParams {
                    session: session.cloned(),
                    days: None,
                };
                let summary: UsageSummary =
                    remote::call::<methods::UsageSummary>(target, client, &params).await?;
                Ok(UsageLines {
                    tiers: summary
                        .tiers
                        .into_iter()
                        .map(|line| (line.tier, line.total))
                        .collect(),
                    purposes: summary.purposes,
                })
            }
        }
    }
}

pub async fn run(args: SessionsArgs) -> Result<(), Failure> {
    let source = Source::open(args.gateway.as_deref(), args.config.as_deref()).await?;
    match args.command {
        SessionsCommand::List { json } => list(&source, json).await,
        SessionsCommand::Show { key, json } => show(&source, &parse_key(&key)?, json).await,
        SessionsCommand::Reset { key, json } => {
            let key = parse_key(&key)?;
            let existed = source.reset(&key).await?;
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
    session_arg(key).map_err(Failure::usage)
}

/// A session as given on the command line: `channel:peer` as it is, a
/// bare name as the CLI's own session (`work` is `cli:work`).
pub(crate) fn session_arg(text: &str) -> Result<SessionKey, String> {
    SessionKey::named(text, "cli").map_err(|e| {
        format!(
            "invalid session '{}': {} (expected a name such as 'work', the CLI's session cli:work, or 'channel:peer' such as 'telegram:12345')",
            e.key, e.reason
        )
    })
}

fn storage_error(error: flynn_core::SessionsError) -> Failure {
    Failure::other(error.to_string())
}

async fn list(source: &Source, json: bool) -> Result<(), Failure> {
    let sessions = source.list().await?;
    if json {
        let out: Vec<_> = sessions
            .iter()
            .map(|s| {
                json!({
                    "session": s.key.as_str(),
                    "title": s.title,
                    "messages": s.messages,
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
    outln!(
        "{:<width$}  {:>8}  {:<20}  TITLE",
        "SESSION",
        "MESSAGES",
        "UPDATED"
    );
    for s in &sessions {
        let line = format!(
            "{:<width$}  {:>8}  {:<20}  {}",
            s.key.as_str(),
            s.messages,
            timestamp(s.updated_at),
            s.title.as_deref().unwrap_or("")
        );
        outln!("{}", line.trim_end());
    }
    Ok(())
}

async fn show(source: &Source, key: &SessionKey, json: bool) -> Result<(), Failure> {
    let history = source.history(key).await?;
    if json {
        let messages: Vec<serde_json::Value> = history
            .iter()
            .map(|(message, principal)| {
                let mut value = json!(message);
                if let (Some(principal), Some(fields)) = (principal, value.as_object_mut()) {
                    fields.insert("principal".to_owned(), json!(principal));
                }
                value
            })
            .collect();
        outln!("{}", json!({"session": key.as_str(), "messages": messages}));
        return Ok(());
    }
    if history.is_empty() {
        return Err(Failure::other(format!("no session {key}")));
    }
    for (message, principal) in &history {
        // A message from anyone but the owner says who sent it.
        let sender = principal
            .as_ref()
            .filter(|p| !p.is_owner())
            .map(ToString::to_string);
        let who = match (message.role, &sender) {
            (Role::User, Some(sender)) => sender.as_str(),
            (Role::User, None) => "user",
            (Role::Assistant, _) => "assistant",
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
pub(crate) fn timestamp(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

pub async fn usage(args: UsageArgs) -> Result<(), Failure> {
    let session = args.session.as_deref().map(parse_key).transpose()?;
    let source = Source::open(args.gateway.as_deref(), args.config.as_deref()).await?;
    let UsageLines {
        tiers: totals,
        purposes: lines,
    } = source.usage(session.as_ref()).await?;
    let total_json = |total: &UsageTotals| {
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
