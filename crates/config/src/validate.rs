//! Checks that need the whole config: references between blocks, names, URLs,
//! minimums, the schema version.

use flynn_automation::Schedule;
use flynn_protocol::config::{
    AutomationConfig, CONFIG_VERSION, ChannelsConfig, EmbedderKind, FlynnConfig, MAIN_AGENT,
    McpConfig, McpTransport, ModelRef, ProviderKind, SearchProvider, SlackMode, TelegramMode,
};
use flynn_protocol::{BUILTIN_TOOL_FAMILIES, GOOGLE_TOOL_FAMILIES, JobName, SessionKey, Tier};

use crate::document::{Document, KeyPath, Located, NodeKind};
use crate::error::{Problem, did_you_mean};

/// Refuses a file whose `version` is newer (or older) than this Flynn
/// reads, before anything else: a newer file's other keys may not make
/// sense to this version, and "unknown key" would hide the real problem.
pub(crate) fn check_version(doc: &Document<'_>) -> Result<(), Located> {
    let NodeKind::Map(entries) = &doc.root.kind else {
        return Ok(());
    };
    let Some((_, node)) = entries.iter().find(|(key, _)| key.text == "version") else {
        return Ok(());
    };
    match node.kind {
        NodeKind::Int(found) if found != i128::from(CONFIG_VERSION) && found >= 0 => Err(Located {
            problem: Box::new(Problem::UnsupportedVersion {
                found: u64::try_from(found).unwrap_or(u64::MAX),
                supported: CONFIG_VERSION,
            }),
            line: node.line,
            column: node.column,
            key_path: KeyPath::keys(&["version"]),
        }),
        _ => Ok(()),
    }
}

/// Every problem in a parsed config, in file order. Models may also name
/// the providers in `from_env` (added from the environment when loaded).
pub(crate) fn validate(
    config: &FlynnConfig,
    doc: &Document<'_>,
    from_env: &[String],
) -> Vec<Located> {
    let mut problems = Vec::new();
    let mut report = |path: KeyPath, problem: Problem| {
        let (line, column) = doc.locate(&path);
        problems.push(Located {
            problem: Box::new(problem),
            line,
            column,
            key_path: path,
        });
    };

    if config.version != CONFIG_VERSION {
        report(
            KeyPath::keys(&["version"]),
            Problem::UnsupportedVersion {
                found: config.version.into(),
                supported: CONFIG_VERSION,
            },
        );
    }

    for (name, provider) in &config.providers {
        let path = KeyPath::keys(&["providers"]).key(name);
        if !is_provider_name(name) {
            report(
                path.clone(),
                Problem::InvalidProviderName { name: name.clone() },
            );
        }
        match &provider.base_url {
            None if provider.kind == ProviderKind::OpenaiCompatible => report(
                path.clone(),
                Problem::MissingBaseUrl {
                    kind: provider.kind.to_string(),
                },
            ),
            Some(url) if !is_http_url(url) => {
                report(
                    path.key("base_url"),
                    Problem::InvalidUrl { url: url.clone() },
                );
            }
            _ => {}
        }
        check_local_provider(provider, &path, &mut report);
    }

    let mut configured: Vec<String> = config.providers.keys().cloned().collect();
    for name in from_env {
        if !configured.contains(name) {
            configured.push(name.clone());
        }
    }
    configured.sort();
    let mut check_refs = |path: KeyPath, models: &[ModelRef]| {
        for (index, model) in models.iter().enumerate() {
            if let Some(problem) = unknown_provider(model.provider(), &configured) {
                report(path.index(index), problem);
            }
        }
    };
    for tier in Tier::ALL {
        check_refs(
            KeyPath::keys(&["models", "tiers", tier.as_str()]),
            config.models.tiers.get(tier),
        );
    }
    check_refs(
        KeyPath::keys(&["models", "fallback"]),
        &config.models.fallback,
    );

    check_agents(config, doc, &configured, &mut report);
    check_channels(&config.channels, &mut report);
    check_automation(config, &mut report);
    check_mcp(&config.mcp, config.google.is_some(), &mut report);
    if !config.automation.gmail.is_empty() && config.google.is_none() {
        report(
            KeyPath::keys(&["automation", "gmail"]),
            Problem::Other {
                message: "a Gmail watch reads a mailbox through the `google` block, which is missing (see docs/google.md)".to_owned(),
            },
        );
    }
    check_gateway(&config.gateway, &mut report);

    if config.agents.max_iterations < 1 {
        report(
            KeyPath::keys(&["agents", "max_iterations"]),
            Problem::TooSmall {
                value: config.agents.max_iterations.into(),
                min: 1,
            },
        );
    }
    const MIN_OUTPUT_LIMIT: u64 = 1024;
    let output_limit = u64::try_from(config.tools.output_limit_bytes).unwrap_or(u64::MAX);
    if output_limit < MIN_OUTPUT_LIMIT {
        report(
            KeyPath::keys(&["tools", "output_limit_bytes"]),
            Problem::TooSmall {
                value: output_limit,
                min: MIN_OUTPUT_LIMIT,
            },
        );
    }

    check_tools(config, &configured, &mut report);
    check_sessions(config, doc, &mut report);
    check_delegation(config, &mut report);
    check_memory(config, &configured, &mut report);

    let retry = &config.models.retry;
    if retry.max_backoff_ms < retry.initial_backoff_ms {
        report(
            KeyPath::keys(&["models", "retry", "max_backoff_ms"]),
            Problem::TooSmall {
                value: retry.max_backoff_ms,
                min: retry.initial_backoff_ms,
            },
        );
    }
    for (model, price) in &config.models.prices {
        let rates = [
            ("input_per_mtok", Some(price.input_per_mtok)),
            ("output_per_mtok", Some(price.output_per_mtok)),
            ("cache_read_per_mtok", price.cache_read_per_mtok),
            ("cache_write_per_mtok", price.cache_write_per_mtok),
        ];
        for (key, rate) in rates {
            if let Some(rate) = rate
                && !(rate.is_finite() && rate >= 0.0)
            {
                report(
                    KeyPath::keys(&["models", "prices"]).key(model).key(key),
                    Problem::Other {
                        message: format!(
                            "price {rate} is not a price, expected a number of USD per million tokens, 0 or more"
                        ),
                    },
                );
            }
        }
    }

    problems.sort_by_key(|p| (p.line, p.column));
    problems
}

/// Agent names; the agents `agents.default` and the routes name; each
/// agent's model and limits.
fn check_agents(
    config: &FlynnConfig,
    doc: &Document<'_>,
    providers: &[String],
    report: &mut impl FnMut(KeyPath, Problem),
) {
    let agents = &config.agents;
    let list = KeyPath::keys(&["agents", "list"]);
    // Each name once, in list order: what references may name.
    let mut names: Vec<String> = Vec::new();
    for (index, agent) in agents.list.iter().enumerate() {
        let path = list.index(index);
        if !is_agent_name(&agent.name) {
            report(
                path.key("name"),
                Problem::InvalidAgentName {
                    name: agent.name.clone(),
                },
            );
        } else if let Some(first) = agents.list[..index]
            .iter()
            .position(|earlier| earlier.name == agent.name)
        {
            report(
                path.key("name"),
                Problem::DuplicateAgent {
                    name: agent.name.clone(),
                    first_line: doc.locate(&list.index(first).key("name")).0,
                },
            );
        }
        if !names.contains(&agent.name) {
            names.push(agent.name.clone());
        }
        if let Some(model) = &agent.model
            && let Some(problem) = unknown_provider(model.provider(), providers)
        {
            report(path.key("model"), problem);
        }
        if agent.max_iterations == Some(0) {
            report(
                path.key("max_iterations"),
                Problem::TooSmall { value: 0, min: 1 },
            );
        }
    }

    let known: Vec<&str> = if agents.list.is_empty() {
        vec![MAIN_AGENT]
    } else {
        names.iter().map(String::as_str).collect()
    };
    let unknown_agent = |name: &str| {
        (!known.contains(&name)).then(|| Problem::UnknownAgent {
            name: name.to_owned(),
            suggestion: did_you_mean(name, known.iter().copied()),
            configured: names.clone(),
        })
    };
    if let Some(problem) = agents.default.as_deref().and_then(unknown_agent) {
        report(KeyPath::keys(&["agents", "default"]), problem);
    }
    for (index, agent) in agents.list.iter().enumerate() {
        let path = list.index(index);
        for (i, name) in agent.can_delegate.iter().enumerate() {
            if let Some(problem) = unknown_agent(name) {
                report(path.key("can_delegate").index(i), problem);
            }
        }
        for (i, choice) in agent.models.iter().enumerate() {
            let choice = choice.trim();
            if choice.parse::<flynn_protocol::Tier>().is_ok() {
                continue;
            }
            match choice.parse::<ModelRef>() {
                Ok(model) => {
                    if let Some(problem) = unknown_provider(model.provider(), providers) {
                        report(path.key("models").index(i), problem);
                    }
                }
                Err(_) => report(
                    path.key("models").index(i),
                    Problem::Other {
                        message: format!(
                            "'{choice}' is neither a tier nor a model; expected fast, default, complex, local, or provider/model such as anthropic/claude-haiku-4-5"
                        ),
                    },
                ),
            }
        }
    }
    let routes = KeyPath::keys(&["agents", "routes"]);
    for (index, route) in agents.routes.iter().enumerate() {
        let path = routes.index(index);
        if let Some(problem) = unknown_agent(&route.agent) {
            report(path.key("agent"), problem);
        }
        for (key, glob, example) in [
            ("channel", &route.channel, "slack*"),
            ("sender", &route.sender, "team-*"),
        ] {
            if glob.trim().is_empty() {
                report(
                    path.key(key),
                    Problem::EmptyPattern {
                        example: example.to_owned(),
                    },
                );
            }
        }
    }
}

/// Hooks, provider overrides, the search backend and the tools' limits.
fn check_tools(
    config: &FlynnConfig,
    configured: &[String],
    report: &mut impl FnMut(KeyPath, Problem),
) {
    let tools = &config.tools;
    for provider in tools.providers.keys() {
        if let Some(problem) = unknown_provider(provider, configured) {
            report(
                KeyPath::keys(&["tools", "providers"]).key(provider),
                problem,
            );
        }
    }
    let search = &tools.web_search;
    let search_path = KeyPath::keys(&["tools", "web_search"]);
    let missing = match search.provider {
        SearchProvider::Brave if search.api_key.is_none() => {
            Some("brave needs tools.web_search.api_key (e.g. ${BRAVE_SEARCH_API_KEY})")
        }
        SearchProvider::Tavily if search.api_key.is_none() => {
            Some("tavily needs tools.web_search.api_key (e.g. ${TAVILY_API_KEY})")
        }
        SearchProvider::Searxng if search.endpoint.is_none() => Some(
            "searxng needs tools.web_search.endpoint, the instance's URL (e.g. http://searxng:8080)",
        ),
        _ => None,
    };
    if let Some(message) = missing {
        report(
            search_path.key("provider"),
            Problem::Other {
                message: message.to_owned(),
            },
        );
    }
    if let Some(endpoint) = &search.endpoint
        && !is_http_url(endpoint)
    {
        report(
            search_path.key("endpoint"),
            Problem::InvalidUrl {
                url: endpoint.clone(),
            },
        );
    }
    let minimums: [(&[&str], u64, u64); 11] = [
        (&["shell", "timeout_secs"], tools.shell.timeout_secs, 1),
        (&["files", "timeout_secs"], tools.files.timeout_secs, 1),
        (
            &["web_fetch", "timeout_secs"],
            tools.web_fetch.timeout_secs,
            1,
        ),
        (&["web_fetch", "max_bytes"], tools.web_fetch.max_bytes, 1024),
        (&["web_search", "timeout_secs"], search.timeout_secs, 1),
        (&["web_search", "max_results"], search.max_results.into(), 1),
        (
            &["process", "max_processes"],
            u64::try_from(tools.process.max_processes).unwrap_or(u64::MAX),
            1,
        ),
        (
            &["process", "max_per_session"],
            u64::try_from(tools.process.max_per_session).unwrap_or(u64::MAX),
            1,
        ),
        (
            &["process", "max_runtime_secs"],
            tools.process.max_runtime_secs,
            1,
        ),
        (
            &["process", "buffer_bytes"],
            u64::try_from(tools.process.buffer_bytes).unwrap_or(u64::MAX),
            1024,
        ),
        (&["audit", "max_bytes"], tools.audit.max_bytes, 1024),
    ];
    for (keys, value, min) in minimums {
        if value < min {
            let mut path = KeyPath::keys(&["tools"]);
            for key in keys {
                path = path.key(key);
            }
            report(path, Problem::TooSmall { value, min });
        }
    }
    for (index, hook) in tools.hooks.iter().enumerate() {
        if hook.tool.trim().is_empty() {
            report(
                KeyPath::keys(&["tools", "hooks"]).index(index).key("tool"),
                Problem::EmptyPattern {
                    example: "shell.*".to_owned(),
                },
            );
        }
    }
    if tools.confirm_timeout_secs < 1 {
        report(
            KeyPath::keys(&["tools", "confirm_timeout_secs"]),
            Problem::TooSmall {
                value: tools.confirm_timeout_secs,
                min: 1,
            },
        );
    }
}

/// Delegation, sub-agents, compaction and tool summarisation limits.
fn check_delegation(config: &FlynnConfig, report: &mut impl FnMut(KeyPath, Problem)) {
    let agents = &config.agents;
    let compaction = &config.compaction;
    let minimums: [(&[&str], u64, u64); 6] = [
        (
            &["agents", "max_delegation_depth"],
            agents.max_delegation_depth.into(),
            1,
        ),
        (
            &["agents", "subagents", "max_concurrent"],
            agents.subagents.max_concurrent.into(),
            1,
        ),
        (
            &["agents", "subagents", "timeout_secs"],
            agents.subagents.timeout_secs,
            1,
        ),
        (
            &["compaction", "keep_turns"],
            compaction.keep_turns.into(),
            1,
        ),
        (&["compaction", "timeout_secs"], compaction.timeout_secs, 1),
        (
            &["compaction", "summary_max_tokens"],
            compaction.summary_max_tokens.into(),
            64,
        ),
    ];
    for (keys, value, min) in minimums {
        if value < min {
            report(KeyPath::keys(keys), Problem::TooSmall { value, min });
        }
    }
    if !(10..=95).contains(&compaction.threshold_pct) {
        report(
            KeyPath::keys(&["compaction", "threshold_pct"]),
            Problem::OutOfRange {
                value: compaction.threshold_pct.into(),
                min: 10,
                max: 95,
            },
        );
    }
    if let Some(bytes) = config.tools.summarise_over_bytes
        && bytes < 1024
    {
        report(
            KeyPath::keys(&["tools", "summarise_over_bytes"]),
            Problem::TooSmall {
                value: u64::try_from(bytes).unwrap_or(u64::MAX),
                min: 1024,
            },
        );
    }
}

/// The memory block: its embedder's provider, key, URL and sizes.
fn check_memory(
    config: &FlynnConfig,
    configured: &[String],
    report: &mut impl FnMut(KeyPath, Problem),
) {
    let memory = &config.memory;
    if memory.max_context_tokens > 0 && memory.max_context_tokens < 100 {
        report(
            KeyPath::keys(&["memory", "max_context_tokens"]),
            Problem::TooSmall {
                value: memory.max_context_tokens.into(),
                min: 100,
            },
        );
    }
    let Some(embeddings) = &memory.embeddings else {
        return;
    };
    let path = KeyPath::keys(&["memory", "embeddings"]);
    if let Some(provider) = &embeddings.provider
        && let Some(problem) = unknown_provider(provider, configured)
    {
        report(path.key("provider"), problem);
    }
    if let Some(url) = &embeddings.base_url
        && !is_http_url(url)
    {
        report(
            path.key("base_url"),
            Problem::InvalidUrl { url: url.clone() },
        );
    }
    let has_key = embeddings.api_key.is_some()
        || embeddings
            .provider
            .as_ref()
            .and_then(|p| config.providers.get(p))
            .is_some_and(|p| p.api_key.is_some());
    let missing = match embeddings.kind {
        EmbedderKind::Gemini if !has_key => {
            Some("gemini embeddings need memory.embeddings.api_key (e.g. ${GEMINI_API_KEY})")
        }
        EmbedderKind::Voyage if !has_key => {
            Some("voyage embeddings need memory.embeddings.api_key (e.g. ${VOYAGE_API_KEY})")
        }
        EmbedderKind::Openai
            if !has_key && embeddings.base_url.is_none() && embeddings.provider.is_none() =>
        {
            Some(
                "openai embeddings need memory.embeddings.api_key (e.g. ${OPENAI_API_KEY}), or a base_url of a compatible server",
            )
        }
        EmbedderKind::Local if embeddings.model_dir.is_none() => Some(
            "local embeddings need memory.embeddings.model_dir: the directory scripts/fetch-minilm.sh fills",
        ),
        _ => None,
    };
    if let Some(message) = missing {
        report(
            path.key("kind"),
            Problem::Other {
                message: message.to_owned(),
            },
        );
    }
    let minimums: [(&str, u64, u64); 2] = [
        ("batch_size", embeddings.batch_size.into(), 1),
        ("timeout_secs", embeddings.timeout_secs, 1),
    ];
    for (key, value, min) in minimums {
        if value < min {
            report(path.key(key), Problem::TooSmall { value, min });
        }
    }
}

/// Where sessions are stored, and the lanes' limits.
fn check_sessions(
    config: &FlynnConfig,
    doc: &Document<'_>,
    report: &mut impl FnMut(KeyPath, Problem),
) {
    let sessions = &config.sessions;
    let url_path = KeyPath::keys(&["sessions", "url"]);
    if let Some(url) = &sessions.url {
        if let Some(problem) = sessions_url_problem(url) {
            report(url_path.clone(), problem);
        }
        if sessions.database.is_some() {
            // Reported at whichever of the two comes second in the file.
            let database_path = KeyPath::keys(&["sessions", "database"]);
            let (path, key, other) = if doc.locate(&url_path) > doc.locate(&database_path) {
                (url_path, "url", "database")
            } else {
                (database_path, "database", "url")
            };
            report(
                path,
                Problem::ConflictingKeys {
                    key: key.to_owned(),
                    other: other.to_owned(),
                },
            );
        }
    }
    let queue_limit = u64::try_from(sessions.queue_limit).unwrap_or(u64::MAX);
    for (key, value) in [
        ("queue_limit", queue_limit),
        ("lane_idle_secs", sessions.lane_idle_secs),
    ] {
        if value < 1 {
            report(
                KeyPath::keys(&["sessions", key]),
                Problem::TooSmall { value, min: 1 },
            );
        }
    }
    if let Some(days) = sessions.retention_days
        && !(1..=MAX_RETENTION_DAYS).contains(&days)
    {
        report(
            KeyPath::keys(&["sessions", "retention_days"]),
            Problem::OutOfRange {
                value: days,
                min: 1,
                max: MAX_RETENTION_DAYS,
            },
        );
    }
}

/// A century: longer is the same as unset, and the cut-off in
/// milliseconds stays far from overflowing.
const MAX_RETENTION_DAYS: u64 = 36_500;

/// Why a session store URL cannot be opened, if it cannot: this build
/// opens `sqlite://` followed by a file path.
fn sessions_url_problem(url: &str) -> Option<Problem> {
    let Some((scheme, rest)) = url
        .split_once(':')
        .filter(|(scheme, _)| is_url_scheme(scheme))
    else {
        return Some(Problem::InvalidSessionsUrl { scheme: None });
    };
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "sqlite" => {
            let path = rest
                .strip_prefix("//")
                .and_then(|path| path.split(['?', '#']).next())
                .unwrap_or_default();
            path.trim_start_matches('/')
                .is_empty()
                .then_some(Problem::InvalidSessionsUrl {
                    scheme: Some(scheme),
                })
        }
        "postgres" | "postgresql" => rest
            .strip_prefix("//")
            .is_none_or(|server| server.is_empty() || server.starts_with(['/', '?', '#']))
            .then_some(Problem::InvalidSessionsUrl {
                scheme: Some(scheme),
            }),
        _ => Some(Problem::InvalidSessionsUrl {
            scheme: Some(scheme),
        }),
    }
}

/// A URL scheme (RFC 3986) of two characters or more, so that a Windows
/// drive (`C:\`) is not taken for one.
fn is_url_scheme(text: &str) -> bool {
    text.len() >= 2
        && text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// A name `/agent`, `--agent` and routes can use.
fn is_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `Some(problem)` when `name` is not among the `configured` providers.
pub(crate) fn unknown_provider(name: &str, configured: &[String]) -> Option<Problem> {
    if configured.iter().any(|c| c == name) {
        return None;
    }
    Some(Problem::UnknownProvider {
        name: name.to_owned(),
        suggestion: did_you_mean(name, configured.iter().map(String::as_str)),
        configured: configured.to_vec(),
    })
}

/// A name `provider/model` references can use.
fn is_provider_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && !name.chars().any(char::is_whitespace)
}

/// `http://` or `https://`, then a host, optionally a numeric port, then
/// anything.
pub(crate) fn is_http_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let rest = match (
        lower.strip_prefix("https://"),
        lower.strip_prefix("http://"),
    ) {
        (Some(rest), _) | (None, Some(rest)) => rest,
        (None, None) => return false,
    };
    if rest.chars().any(char::is_whitespace) {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        match bracketed.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return false,
        }
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    !host.is_empty()
        && port.is_none_or(|port| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()))
}

/// Settings a channel cannot work without, named with what to set.
fn check_channels(channels: &ChannelsConfig, report: &mut impl FnMut(KeyPath, Problem)) {
    let mut need = |path: KeyPath, ok: bool, message: &str| {
        if !ok {
            report(
                path,
                Problem::Other {
                    message: message.to_owned(),
                },
            );
        }
    };
    let set = |value: &str| !value.trim().is_empty();
    let set_opt = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.trim().is_empty());
    if let Some(telegram) = &channels.telegram {
        let at = KeyPath::keys(&["channels", "telegram"]);
        need(
            at.key("bot_token"),
            set(&telegram.bot_token),
            "empty: paste the token @BotFather gave (or `${TELEGRAM_BOT_TOKEN}`)",
        );
        need(
            at.key("api_url"),
            is_http_url(&telegram.api_url),
            "not an http(s) URL",
        );
        if telegram.mode == TelegramMode::Webhook {
            need(
                at.key("webhook_url"),
                telegram
                    .webhook_url
                    .as_deref()
                    .is_some_and(|u| u.starts_with("https://")),
                "needed with mode: webhook: the public https:// address of this gateway's /channels/telegram/webhook",
            );
            need(
                at.key("webhook_secret"),
                telegram.webhook_secret.as_deref().is_some_and(|s| {
                    (1..=256).contains(&s.len())
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                }),
                "needed with mode: webhook: 1-256 characters of A-Z a-z 0-9 _ - (`openssl rand -hex 32`)",
            );
        }
    }
    if let Some(discord) = &channels.discord {
        need(
            KeyPath::keys(&["channels", "discord", "bot_token"]),
            set(&discord.bot_token),
            "empty: paste the bot token from the Developer Portal (or `${DISCORD_BOT_TOKEN}`)",
        );
    }
    if let Some(slack) = &channels.slack {
        let at = KeyPath::keys(&["channels", "slack"]);
        need(
            at.key("bot_token"),
            set(&slack.bot_token),
            "empty: paste the Bot User OAuth Token (xoxb-…)",
        );
        match slack.mode {
            SlackMode::Socket => need(
                at.key("app_token"),
                set_opt(&slack.app_token),
                "needed with mode: socket: an app-level token with connections:write (xapp-…); or use mode: events",
            ),
            SlackMode::Events => need(
                at.key("signing_secret"),
                set_opt(&slack.signing_secret),
                "needed with mode: events: the signing secret (Basic Information → App Credentials)",
            ),
        }
    }
    if let Some(whatsapp) = &channels.whatsapp {
        let at = KeyPath::keys(&["channels", "whatsapp"]);
        for (key, value, what) in [
            (
                "access_token",
                &whatsapp.access_token,
                "a system user's access token",
            ),
            (
                "phone_number_id",
                &whatsapp.phone_number_id,
                "the number's Phone number ID",
            ),
            (
                "app_secret",
                &whatsapp.app_secret,
                "the app secret (webhooks are signed with it)",
            ),
            (
                "verify_token",
                &whatsapp.verify_token,
                "the token you type into the webhook settings",
            ),
        ] {
            need(at.key(key), set(value), &format!("empty: set it to {what}"));
        }
    }
}

/// Cron expressions, time zones, unique job names, session keys, and the
/// agents and chat channels jobs name.
fn check_automation(config: &FlynnConfig, report: &mut impl FnMut(KeyPath, Problem)) {
    let automation: &AutomationConfig = &config.automation;
    let agents: Vec<String> = config.agents.list.iter().map(|a| a.name.clone()).collect();
    let known_agents: Vec<&str> = if agents.is_empty() {
        vec![MAIN_AGENT]
    } else {
        agents.iter().map(String::as_str).collect()
    };
    let channels: Vec<&str> = config
        .channels
        .access()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for (index, job) in automation.jobs.iter().enumerate() {
        if let Some(agent) = &job.agent
            && !known_agents.contains(&agent.as_str())
        {
            report(
                KeyPath::keys(&["automation", "jobs"])
                    .index(index)
                    .key("agent"),
                Problem::UnknownAgent {
                    name: agent.clone(),
                    suggestion: did_you_mean(agent, known_agents.iter().copied()),
                    configured: agents.clone(),
                },
            );
        }
    }
    let mut other = |path: KeyPath, message: String| report(path, Problem::Other { message });
    let mut seen: Vec<&str> = Vec::new();
    for (index, job) in automation.jobs.iter().enumerate() {
        let at = KeyPath::keys(&["automation", "jobs"]).index(index);
        if job.name.trim().is_empty() {
            other(
                at.key("name"),
                "empty: give the job a name (cron.list and cron.remove use it)".to_owned(),
            );
        } else if let Err(problem) = JobName::new(job.name.as_str()) {
            other(at.key("name"), problem.to_string());
        } else if seen.contains(&job.name.as_str()) {
            other(
                at.key("name"),
                format!(
                    "duplicate job name '{}': every job in automation.jobs needs its own name",
                    job.name
                ),
            );
        } else {
            seen.push(&job.name);
        }
        if let Some(problem) = cron_problem(&job.schedule) {
            other(at.key("schedule"), problem);
        }
        if let Some(problem) = timezone_problem(&job.timezone) {
            other(at.key("timezone"), problem);
        }
        for (key, value) in [("session", &job.session), ("deliver_to", &job.deliver_to)] {
            if let Some(value) = value
                && let Err(error) = value.parse::<SessionKey>()
            {
                other(
                    at.key(key),
                    format!(
                        "'{value}' is not a session key: {}, expected `<channel>:<peer>` (`telegram:123456789`)",
                        error.reason
                    ),
                );
            }
        }
        if let Some(problem) = job
            .deliver_to
            .as_deref()
            .and_then(|to| unknown_channel(to, &channels))
        {
            other(at.key("deliver_to"), problem);
        }
    }
    let heartbeat = &automation.heartbeat;
    let at = KeyPath::keys(&["automation", "heartbeat"]);
    if heartbeat.every_mins < 1 {
        report(
            at.key("every_mins"),
            Problem::TooSmall {
                value: heartbeat.every_mins.into(),
                min: 1,
            },
        );
    }
    let mut other = |path: KeyPath, message: String| report(path, Problem::Other { message });
    if let Some(problem) = timezone_problem(&heartbeat.timezone) {
        other(at.key("timezone"), problem);
    }
    if let Some(value) = &heartbeat.deliver_to {
        if let Err(error) = value.parse::<SessionKey>() {
            other(
                at.key("deliver_to"),
                format!(
                    "'{value}' is not a session key: {}, expected `<channel>:<peer>` (`telegram:123456789`)",
                    error.reason
                ),
            );
        } else if let Some(problem) = unknown_channel(value, &channels) {
            other(at.key("deliver_to"), problem);
        }
    }
    for (name, hook) in &config.gateway.webhooks {
        let Some(value) = &hook.deliver_to else {
            continue;
        };
        let at = KeyPath::keys(&["gateway", "webhooks", name, "deliver_to"]);
        if let Err(error) = value.parse::<SessionKey>() {
            other(
                at,
                format!(
                    "'{value}' is not a session key: {}, expected `<channel>:<peer>` (`telegram:123456789`)",
                    error.reason
                ),
            );
        } else if let Some(problem) = unknown_channel(value, &channels) {
            other(at, problem);
        }
    }
}

/// Server names usable as tool-name prefixes, one transport each, the
/// keys that transport needs. The Google families are reserved only when
/// `google` is configured: a server called `gmail` works without it.
fn check_mcp(mcp: &McpConfig, google: bool, report: &mut impl FnMut(KeyPath, Problem)) {
    let reserved: Vec<&str> = BUILTIN_TOOL_FAMILIES
        .iter()
        .copied()
        .filter(|family| google || !GOOGLE_TOOL_FAMILIES.contains(family))
        .collect();
    for (name, server) in &mcp.servers {
        let at = KeyPath::keys(&["mcp", "servers", name]);
        let mut other = |path: KeyPath, message: String| report(path, Problem::Other { message });
        let well_formed = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !well_formed {
            other(
                at.clone(),
                format!(
                    "server name '{name}' cannot prefix its tools: use letters, digits, `-` and `_` (its tools are offered as `<name>.<tool>`)"
                ),
            );
        } else if reserved.contains(&name.as_str()) {
            other(
                at.clone(),
                format!(
                    "server name '{name}' is taken by Flynn's built-in `{name}.*` tools; choose another (reserved: {})",
                    reserved.join(", ")
                ),
            );
        }
        match server.transport() {
            McpTransport::Sse => other(
                at.key("type"),
                "`sse` (the older HTTP+SSE transport) is not supported: use the server's streamable HTTP endpoint with `type: http`, or run it over stdio".to_owned(),
            ),
            McpTransport::Stdio => {
                match &server.command {
                    None => other(
                        at.key("command"),
                        "missing: a stdio server needs the program to start (`command: npx`), or give `url` for an HTTP server".to_owned(),
                    ),
                    Some(command) if command.trim().is_empty() => other(
                        at.key("command"),
                        "empty: name the program to start (`npx`, `uvx`, a path)".to_owned(),
                    ),
                    Some(_) => {}
                }
                for key in ["url", "headers", "bearer_token"] {
                    let set = match key {
                        "url" => server.url.is_some(),
                        "headers" => !server.headers.is_empty(),
                        _ => server.bearer_token.is_some(),
                    };
                    if set {
                        other(
                            at.key(key),
                            format!("`{key}` is for HTTP servers, and this one is started with `command` (stdio): keep one of the two"),
                        );
                    }
                }
            }
            McpTransport::Http => {
                match &server.url {
                    None => other(
                        at.key("url"),
                        "missing: an HTTP server needs its endpoint (`url: https://example.com/mcp`)".to_owned(),
                    ),
                    Some(url) if !is_http_url(url) => {
                        report(at.key("url"), Problem::InvalidUrl { url: url.clone() });
                    }
                    Some(_) => {}
                }
                let mut other = |path: KeyPath, message: String| report(path, Problem::Other { message });
                for (key, set) in [
                    ("command", server.command.is_some()),
                    ("args", !server.args.is_empty()),
                    ("env", !server.env.is_empty()),
                    ("cwd", server.cwd.is_some()),
                ] {
                    if set {
                        other(
                            at.key(key),
                            format!("`{key}` is for servers Flynn starts (stdio), and this one is reached at `url`: keep one of the two"),
                        );
                    }
                }
                for (header, value) in &server.headers {
                    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                        other(
                            at.key("headers").key(header),
                            format!("'{header}' is not an HTTP header name (letters, digits and `-`)"),
                        );
                    } else if http::HeaderValue::from_str(value).is_err() {
                        other(
                            at.key("headers").key(header),
                            "not a valid header value (no line breaks or control characters)".to_owned(),
                        );
                    }
                }
            }
        }
        for (key, value) in [
            ("startup_timeout_secs", server.startup_timeout_secs),
            ("timeout_secs", server.timeout_secs),
        ] {
            if value < 1 {
                report(at.key(key), Problem::TooSmall { value, min: 1 });
            }
        }
    }
}

/// A `deliver_to` whose channel is not a configured chat channel.
fn unknown_channel(deliver_to: &str, channels: &[&str]) -> Option<String> {
    let channel = deliver_to.parse::<SessionKey>().ok()?.channel().to_owned();
    if channels.contains(&channel.as_str()) {
        return None;
    }
    let suggestion = did_you_mean(&channel, channels.iter().copied())
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    Some(format!(
        "'{deliver_to}' names the channel '{channel}'{suggestion}, which is not configured (chat channels: {}); answers are delivered through a configured chat channel: add channels.{channel}, or deliver to one that is",
        if channels.is_empty() {
            "none".to_owned()
        } else {
            channels.join(", ")
        }
    ))
}

/// What is wrong with a cron expression: the daemon's own parser reads it
/// (the zone is checked on its own, by [`timezone_problem`]).
fn cron_problem(expr: &str) -> Option<String> {
    Schedule::parse(expr, "UTC")
        .err()
        .map(|error| error.to_string())
}

/// What is wrong with an IANA time zone name.
fn timezone_problem(name: &str) -> Option<String> {
    if name.parse::<chrono_tz::Tz>().is_ok() {
        return None;
    }
    let suggestion = did_you_mean(name, chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()))
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    Some(format!(
        "unknown time zone '{name}'{suggestion}, expected an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`"
    ))
}

/// Shortest token or webhook secret accepted: 32 characters (128 bits
/// of hex), what `openssl rand -hex 16` prints at least.
pub const MIN_SECRET_LEN: usize = 32;

fn check_gateway(
    gateway: &flynn_protocol::config::GatewayConfig,
    report: &mut impl FnMut(KeyPath, Problem),
) {
    let at = KeyPath::keys(&["gateway"]);
    let mut other = |path: KeyPath, message: String| report(path, Problem::Other { message });
    if let Some(token) = &gateway.token
        && !token.trim().is_empty()
        && token.trim().len() < MIN_SECRET_LEN
    {
        other(
            at.key("token"),
            format!(
                "the token is {} characters; expected at least {MIN_SECRET_LEN} (make one with `openssl rand -hex 32`)",
                token.trim().len()
            ),
        );
    }
    let mut names: Vec<&str> = Vec::new();
    for (index, entry) in gateway.tokens.iter().enumerate() {
        let path = at.key("tokens").index(index);
        let well_formed = !entry.name.is_empty()
            && entry.name.len() <= 32
            && entry
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !well_formed {
            other(
                path.key("name"),
                format!(
                    "token name '{}' is not usable: expected 1 to 32 letters, digits, `-` or `_`",
                    entry.name
                ),
            );
        } else if names.contains(&entry.name.as_str()) {
            other(
                path.key("name"),
                format!(
                    "token name '{}' is used twice; names must be unique",
                    entry.name
                ),
            );
        } else if entry.name == "default" {
            other(
                path.key("name"),
                "token name 'default' is the name of the admin token of gateway.token; choose another".to_owned(),
            );
        }
        names.push(&entry.name);
        match (&entry.token, &entry.token_file) {
            (Some(_), Some(_)) => other(
                path.clone(),
                "give `token` or `token_file`, not both".to_owned(),
            ),
            (None, None) => other(
                path.clone(),
                "expected `token` (the secret) or `token_file` (a file holding it)".to_owned(),
            ),
            (Some(token), None) if token.trim().len() < MIN_SECRET_LEN => other(
                path.key("token"),
                format!(
                    "the token is {} characters; expected at least {MIN_SECRET_LEN} (`flynn token create` makes one)",
                    token.trim().len()
                ),
            ),
            _ => {}
        }
        if entry.scopes.is_empty() {
            other(
                path.key("scopes"),
                "expected at least one scope: chat, read, approve or admin".to_owned(),
            );
        }
    }
    let tailscale = &gateway.tailscale;
    let ts = at.key("tailscale");
    if !tailscale.users.is_empty() || tailscale.listen.is_some() {
        if tailscale.listen.is_none() {
            other(
                ts.key("listen"),
                "gateway.tailscale.users needs a listener only `tailscale serve` targets: set listen to `unix:/run/flynn/ts.sock` (or a loopback host:port) and run `tailscale serve unix:/run/flynn/ts.sock`".to_owned(),
            );
        }
        if tailscale
            .host
            .as_deref()
            .is_none_or(|h| h.trim().is_empty())
        {
            other(
                ts.key("host"),
                "expected the gateway's Tailscale name, e.g. `box.tailnet.ts.net` (`tailscale status --self`)".to_owned(),
            );
        }
        if tailscale.scopes.is_empty() {
            other(
                ts.key("scopes"),
                "expected at least one scope: chat, read, approve or admin".to_owned(),
            );
        }
    }
    if let Some(listen) = &tailscale.listen {
        let ok = match listen.strip_prefix("unix:") {
            Some(path) => path.starts_with('/'),
            None => listen
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|addr| addr.ip().is_loopback()),
        };
        if !ok {
            other(
                ts.key("listen"),
                format!(
                    "'{listen}' is not a Tailscale listener: expected `unix:/absolute/path.sock` or a loopback address such as `127.0.0.1:18801`"
                ),
            );
        } else if listen == &gateway.bind {
            other(
                ts.key("listen"),
                "must differ from gateway.bind: identity headers are honoured only on a listener no one but `tailscale serve` reaches".to_owned(),
            );
        }
    }
    for (name, hook) in &gateway.webhooks {
        if hook.secret.len() < MIN_SECRET_LEN {
            other(
                at.key("webhooks").key(name).key("secret"),
                format!(
                    "the secret is {} bytes; expected at least {MIN_SECRET_LEN} (`openssl rand -hex 32`): anyone can sign with an empty or short one",
                    hook.secret.len()
                ),
            );
        }
    }
    if gateway.max_connections < 16 {
        report_min(
            &mut other,
            at.key("max_connections"),
            gateway.max_connections.into(),
            16,
        );
    }
    if gateway.max_connections_per_ip < 1 {
        report_min(&mut other, at.key("max_connections_per_ip"), 0, 1);
    }
    if gateway.header_timeout_secs < 1 {
        report_min(&mut other, at.key("header_timeout_secs"), 0, 1);
    }
    if gateway.body_timeout_secs < 1 {
        report_min(&mut other, at.key("body_timeout_secs"), 0, 1);
    }
    // A day is far past any service manager's stop timeout; a larger value
    // is a typo (and overflowed the shutdown deadline once).
    if gateway.shutdown_grace_secs > MAX_GRACE_SECS {
        other(
            at.key("shutdown_grace_secs"),
            format!(
                "{} is too large; expected at most {MAX_GRACE_SECS} (a day); a service manager stops waiting long before",
                gateway.shutdown_grace_secs
            ),
        );
    }
}

/// The longest `gateway.shutdown_grace_secs` accepted.
const MAX_GRACE_SECS: u64 = 24 * 3600;

fn report_min(other: &mut impl FnMut(KeyPath, String), path: KeyPath, value: u64, min: u64) {
    other(
        path,
        format!("{value} is too small; expected at least {min}"),
    );
}

/// `kind: local` takes `model_path` (a file that exists), `threads` and
/// `context`; other kinds take none of them.
fn check_local_provider(
    provider: &flynn_protocol::config::ProviderConfig,
    path: &KeyPath,
    report: &mut impl FnMut(KeyPath, Problem),
) {
    if provider.kind != ProviderKind::Local {
        for (key, set) in [
            ("model_path", provider.model_path.is_some()),
            ("threads", provider.threads.is_some()),
            ("context", provider.context.is_some()),
        ] {
            if set {
                report(
                    path.key(key),
                    Problem::Other {
                        message: format!(
                            "{key} is only for providers of kind local (this one is {})",
                            provider.kind
                        ),
                    },
                );
            }
        }
        return;
    }
    match &provider.model_path {
        None => report(
            path.clone(),
            Problem::MissingKey {
                key: "model_path".to_owned(),
            },
        ),
        Some(file) if !file.is_file() => report(
            path.key("model_path"),
            Problem::Other {
                message: format!(
                    "model file {} does not exist; download a GGUF model with `flynn models pull <repo>/<file.gguf>` (or scripts/fetch-smollm2.sh) and set model_path to the path it prints",
                    file.display()
                ),
            },
        ),
        Some(_) => {}
    }
    for (key, value) in [("threads", provider.threads), ("context", provider.context)] {
        if value == Some(0) {
            report(path.key(key), Problem::TooSmall { value: 0, min: 1 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_urls_are_sqlite_with_a_path() {
        for url in [
            "sqlite:///var/lib/flynn/sessions.db",
            "sqlite://sessions.db",
            "SQLite://data/sessions.db?mode=rwc",
        ] {
            assert_eq!(sessions_url_problem(url), None, "{url}");
        }
        let invalid = |scheme: Option<&str>| {
            Some(Problem::InvalidSessionsUrl {
                scheme: scheme.map(str::to_owned),
            })
        };
        for (url, problem) in [
            ("sqlite://", invalid(Some("sqlite"))),
            ("sqlite:///", invalid(Some("sqlite"))),
            ("sqlite:sessions.db", invalid(Some("sqlite"))),
            ("sqlite://?mode=rwc", invalid(Some("sqlite"))),
            ("mysql://localhost/flynn", invalid(Some("mysql"))),
            ("/var/lib/flynn/sessions.db", invalid(None)),
            ("C:\\flynn\\sessions.db", invalid(None)),
            ("", invalid(None)),
            ("postgres://flynn:secret@localhost/flynn", None),
            ("PostgreSQL://localhost", None),
            ("postgresql://db.internal:5433/flynn?sslmode=require", None),
            ("postgres://", invalid(Some("postgres"))),
            ("postgres:///flynn", invalid(Some("postgres"))),
            ("postgres:localhost", invalid(Some("postgres"))),
        ] {
            assert_eq!(sessions_url_problem(url), problem, "{url}");
        }
    }

    #[test]
    fn agent_names_are_letters_digits_dashes_and_underscores() {
        for name in ["main", "coder-2", "home_assistant", "A"] {
            assert!(is_agent_name(name), "{name}");
        }
        for name in ["", "my agent", "coder/2", "héllo", "a.b"] {
            assert!(!is_agent_name(name), "{name}");
        }
    }

    #[test]
    fn http_urls_need_a_scheme_and_a_host() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "https://api.openai.com/v1",
            "HTTPS://Example.org",
            "http://[::1]:11434/v1",
            "http://user:pw@host:1/x?y#z",
            "http://localhost",
        ] {
            assert!(is_http_url(url), "{url}");
        }
        for url in [
            "localhost:8080",
            "ftp://example.org",
            "http://",
            "http:///v1",
            "http://host:port/v1",
            "http://host:/v1",
            "http://exa mple.org",
            "http://[::1",
        ] {
            assert!(!is_http_url(url), "{url}");
        }
    }
}
