//! Every kind of error, as the whole message a user reads.

use std::path::PathBuf;

use flynn_config::{Diagnostic, Error, MapEnv, Problem, parse_str};

use crate::parse;

#[track_caller]
fn assert_error(text: &str, expected: &str) {
    assert_eq!(parse(text), Err(expected.to_owned()), "for:\n{text}");
}

#[test]
fn unknown_key_suggests_the_closest_and_lists_the_valid_ones() {
    assert_error(
        "providers:\n  anthropic:\n    kind: anthropic\n    api_kye: sk-123\n",
        "config.yaml:4:5: providers.anthropic.api_kye: unknown key 'api_kye' (did you mean 'api_key'?), expected one of: kind, base_url, api_key, connect_timeout_secs, read_timeout_secs, headers, region, context_window, local, model_path, threads, context",
    );
    assert_error(
        "version: 1\nmodel:\n  tiers: {}\n",
        "config.yaml:2:1: model: unknown key 'model' (did you mean 'models'?), expected one of: version, providers, models, agents, tools, sessions, gateway, compaction, memory, channels, automation, mcp, voice, google",
    );
    assert_error(
        "models:\n  tiers:\n    fats: []\n",
        "config.yaml:3:5: models.tiers.fats: unknown key 'fats' (did you mean 'fast'?), expected one of: fast, default, complex, local",
    );
    assert_error(
        "tools:\n  colour: blue\n",
        "config.yaml:2:3: tools.colour: unknown key 'colour', expected one of: enabled, profile, autonomy, taint, env, deny, hooks, confirm_timeout_secs, output_limit_bytes, summarise_over_bytes, workspace, providers, deferred, audit, sandbox, shell, files, web_fetch, web_search, process, browser",
    );
}

#[test]
fn unknown_enum_value_suggests_and_lists_the_valid_ones() {
    assert_error(
        "providers:\n  anthropic: {kind: antropic}\n",
        "config.yaml:2:21: providers.anthropic.kind: unknown provider kind 'antropic' (did you mean 'anthropic'?), expected one of: anthropic, openai, openai-compatible, ollama, llamacpp, vllm, lmstudio, openrouter, github-models, groq, gemini, bedrock, local",
    );
    assert_error(
        "agents:\n  primary_tier: fasst\n",
        "config.yaml:2:17: agents.primary_tier: unknown tier 'fasst' (did you mean 'fast'?), expected one of: fast, default, complex, local",
    );
    assert_error(
        "agents:\n  primary_tier: [fast]\n",
        "config.yaml:2:17: agents.primary_tier: found a list, expected one of: fast, default, complex, local",
    );
}

#[test]
fn wrong_type_says_what_was_found_and_what_was_expected() {
    assert_error(
        "agents:\n  max_iterations: ten\n",
        "config.yaml:2:19: agents.max_iterations: found the string 'ten', expected a whole number from 0 to 4294967295",
    );
    assert_error(
        "models:\n  tiers:\n    fast: anthropic/claude-haiku-4-5\n",
        "config.yaml:3:11: models.tiers.fast: found the string 'anthropic/claude-haiku-4-5', expected a list",
    );
    assert_error(
        "gateway: 127.0.0.1:18800\n",
        "config.yaml:1:10: gateway: found the string '127.0.0.1:18800', expected a mapping with keys from: bind, token, allowed_origins, max_request_bytes, rate_limit_per_minute, tailscale_users, tailscale, tokens, allowed_hosts, max_connections, max_connections_per_ip, header_timeout_secs, body_timeout_secs, auth_failures_per_minute, shutdown_grace_secs, webhooks",
    );
    assert_error(
        "tools:\n  output_limit_bytes: 1.5e6\n",
        "config.yaml:2:23: tools.output_limit_bytes: found the number 1.5e6, expected a whole number, 0 or more",
    );
    assert_error(
        "providers:\n  local:\n    kind: ollama\n    headers: [x]\n",
        "config.yaml:4:14: providers.local.headers: found a list, expected a mapping",
    );
    assert_error(
        "- version: 1\n",
        "config.yaml:1:1: found a list, expected a mapping with keys from: version, providers, models, agents, tools, sessions, gateway, compaction, memory, channels, automation, mcp, voice, google",
    );
}

#[test]
fn invalid_model_reference_names_the_expected_form() {
    assert_error(
        "models:\n  fallback:\n    - gpt-4o\n",
        "config.yaml:3:7: models.fallback[0]: invalid model 'gpt-4o' (expected 'provider/model', e.g. 'anthropic/claude-sonnet-4-5')",
    );
}

#[test]
fn model_naming_an_unknown_provider_suggests_a_configured_one() {
    assert_error(
        "providers:\n  anthropic: {kind: anthropic}\n  local: {kind: openai-compatible, base_url: 'http://127.0.0.1:8080/v1'}\nmodels:\n  tiers:\n    fast:\n      - anthropc/claude-haiku-4-5\n",
        "config.yaml:7:9: models.tiers.fast[0]: unknown provider 'anthropc' (did you mean 'anthropic'?), expected one of the configured providers: anthropic, local",
    );
    assert_error(
        "models:\n  fallback: [ollama/llama3.2]\n",
        "config.yaml:2:14: models.fallback[0]: unknown provider 'ollama', expected a provider configured under 'providers' (none are)",
    );
}

#[test]
fn missing_and_duplicate_keys() {
    assert_error(
        "providers:\n  local:\n    base_url: http://127.0.0.1:8080/v1\n",
        "config.yaml:3:5: providers.local: missing key 'kind', expected it in this block",
    );
    assert_error(
        "agents:\n  max_iterations: 5\n  max_iterations: 6\n",
        "config.yaml:3:3: agents.max_iterations: duplicate key 'max_iterations', expected each key once",
    );
}

#[test]
fn unset_environment_variable_is_named_at_its_reference() {
    assert_error(
        "providers:\n  anthropic:\n    kind: anthropic\n    api_key: \"${ANTHROPIC_API_KEY}\"\n",
        "config.yaml:4:15: providers.anthropic.api_key: environment variable ANTHROPIC_API_KEY is not set, expected it to be set or a default as in ${ANTHROPIC_API_KEY:-default}",
    );
    assert_error(
        "gateway:\n  bind: ${FLYNN_HOST:-127.0.0.1}:${FLYNN_PORT}\n",
        "config.yaml:2:34: gateway.bind: environment variable FLYNN_PORT is not set, expected it to be set or a default as in ${FLYNN_PORT:-default}",
    );
    assert_error(
        "gateway:\n  token: ${TOKEN:?required}\n",
        "config.yaml:2:10: gateway.token: unsupported reference '${TOKEN:?required}', expected ${NAME} or ${NAME:-default} (write $${ for a literal ${)",
    );
}

#[test]
fn yaml_syntax_error_has_a_line_and_column() {
    assert_error(
        "models:\n  tiers:\n    fast: [anthropic/claude-haiku-4-5\n  fallback: []\n",
        "config.yaml:4:11: invalid YAML: illegal placement of ':' indicator",
    );
    assert_error(
        "gateway:\n  bind: \"127.0.0.1\n",
        "config.yaml:2:9: invalid YAML: unclosed quote",
    );
    assert_error(
        "agents:\n  max_iterations: 5\n max_tokens: 1\n",
        "config.yaml:3:2: invalid YAML: while parsing a block mapping, did not find expected key",
    );
}

#[test]
fn version_newer_than_supported_is_refused_before_anything_else() {
    assert_error(
        "version: 2\nprovider_pools: {}\n",
        "config.yaml:1:10: version: config version 2 is newer than this Flynn understands, expected version 1 or lower (upgrade Flynn to use this file)",
    );
    assert_error(
        "version: 0\n",
        "config.yaml:1:10: version: config version 0 does not exist, expected version 1",
    );
}

#[test]
fn semantic_checks_point_at_the_offending_key() {
    assert_error(
        "providers:\n  local:\n    kind: openai-compatible\n",
        "config.yaml:3:5: providers.local: a provider of kind 'openai-compatible' needs a base_url, expected e.g. base_url: http://127.0.0.1:8080/v1",
    );
    assert_error(
        "providers:\n  local:\n    kind: ollama\n    base_url: localhost:11434\n",
        "config.yaml:4:15: providers.local.base_url: invalid URL 'localhost:11434', expected an http:// or https:// URL with a host",
    );
    assert_error(
        "agents:\n  max_iterations: 0\n",
        "config.yaml:2:19: agents.max_iterations: 0 is too small, expected at least 1",
    );
    assert_error(
        "gateway:\n  shutdown_grace_secs: 18446744073709551615\n",
        "config.yaml:2:24: gateway.shutdown_grace_secs: 18446744073709551615 is too large; expected at most 86400 (a day); a service manager stops waiting long before",
    );
    assert_error(
        "tools:\n  output_limit_bytes: 100\n",
        "config.yaml:2:23: tools.output_limit_bytes: 100 is too small, expected at least 1024",
    );
    assert_error(
        "compaction:\n  threshold_pct: 99\n",
        "config.yaml:2:18: compaction.threshold_pct: 99 is out of range, expected 10 to 95",
    );
    assert_error(
        "agents:\n  delegation:\n    compaction: fast\n  max_delegation_depth: 0\n",
        "config.yaml:4:25: agents.max_delegation_depth: 0 is too small, expected at least 1",
    );
    assert_error(
        "tools:\n  summarise_over_bytes: 10\n",
        "config.yaml:2:25: tools.summarise_over_bytes: 10 is too small, expected at least 1024",
    );
    assert_error(
        "agents:\n  delegation:\n    compaction: cheap\n",
        "config.yaml:3:17: agents.delegation.compaction: unknown tier 'cheap', expected one of: fast, default, complex, local",
    );
    assert_error(
        "providers:\n  my local:\n    kind: ollama\n",
        "config.yaml:3:5: providers[\"my local\"]: invalid provider name 'my local', expected a name without '/' or spaces",
    );
}

#[test]
fn every_semantic_problem_is_listed_in_file_order() {
    let text = "\
providers:
  anthropic:
    kind: anthropic
  local:
    kind: openai-compatible
models:
  tiers:
    fast: [anthropc/claude-haiku-4-5]
    default: [anthropic/claude-sonnet-4-5, locl/qwen2.5]
  fallback: [ollama/llama3.2]
agents:
  max_iterations: 0
tools:
  output_limit_bytes: 10
";
    insta::assert_snapshot!(parse(text).unwrap_err());
}

#[test]
fn errors_carry_typed_fields() {
    let error = parse_str(
        "agents:\n  max_iterations: 0\n",
        std::path::Path::new("/etc/flynn/config.yaml"),
        &MapEnv::new(),
    )
    .unwrap_err();
    assert!(matches!(error, Error::Invalid { .. }));
    assert_eq!(
        error.diagnostics(),
        [Diagnostic {
            path: PathBuf::from("/etc/flynn/config.yaml"),
            line: 2,
            column: 19,
            key_path: "agents.max_iterations".to_owned(),
            problem: Problem::TooSmall { value: 0, min: 1 },
        }]
    );
}

#[test]
fn retry_and_price_settings_are_checked() {
    assert_error(
        "models:\n  retry:\n    initial_backoff_ms: 1000\n    max_backoff_ms: 10\n",
        "config.yaml:4:21: models.retry.max_backoff_ms: 10 is too small, expected at least 1000",
    );
    assert_error(
        "models:\n  prices:\n    local/qwen2.5:\n      input_per_mtok: -1\n      output_per_mtok: 0\n",
        "config.yaml:4:23: models.prices[\"local/qwen2.5\"].input_per_mtok: price -1 is not a price, expected a number of USD per million tokens, 0 or more",
    );
}

#[test]
fn agent_names_must_be_usable_and_unique() {
    let text = "\
agents:
  list:
    - name: coder
    - name: my agent
    - name: ''
    - name: coder
";
    assert_error(
        text,
        "config.yaml:4:13: agents.list[1].name: invalid agent name 'my agent', expected only letters, digits, '-' and '_'
config.yaml:5:13: agents.list[2].name: empty agent name, expected a name of letters, digits, '-' and '_'
config.yaml:6:13: agents.list[3].name: duplicate agent name 'coder' (first at line 3), expected each agent name once",
    );
    assert_error(
        "agents:\n  list:\n    - tier: fast\n",
        "config.yaml:3:7: agents.list[0]: missing key 'name', expected it in this block",
    );
}

#[test]
fn default_and_routes_must_name_an_agent_of_the_list() {
    let text = "\
agents:
  default: chatt
  list:
    - name: coder
    - name: chat
  routes:
    - channel: telegram
      agent: codr
    - agent: chat
";
    assert_error(
        text,
        "config.yaml:2:12: agents.default: unknown agent 'chatt' (did you mean 'chat'?), expected one of the agents in agents.list: coder, chat
config.yaml:8:14: agents.routes[0].agent: unknown agent 'codr' (did you mean 'coder'?), expected one of the agents in agents.list: coder, chat",
    );
}

#[test]
fn can_delegate_names_agents_and_models_name_tiers_or_models() {
    let text = "\
agents:
  list:
    - name: public
      can_delegate: [helpr]
      models: [fast, gpt-4o, nowhere/model]
    - name: helper
";
    assert_error(
        text,
        "config.yaml:4:22: agents.list[0].can_delegate[0]: unknown agent 'helpr' (did you mean 'helper'?), expected one of the agents in agents.list: public, helper
config.yaml:5:22: agents.list[0].models[1]: 'gpt-4o' is neither a tier nor a model; expected fast, default, complex, local, or provider/model such as anthropic/claude-haiku-4-5
config.yaml:5:30: agents.list[0].models[2]: unknown provider 'nowhere', expected a provider configured under 'providers' (none are)",
    );
}

#[test]
fn without_a_list_the_only_agent_is_main() {
    assert_error(
        "agents:\n  default: coder\n",
        "config.yaml:2:12: agents.default: unknown agent 'coder', expected 'main' (the only agent while agents.list is empty)",
    );
    assert_error(
        "agents:\n  routes:\n    - {sender: '42', agent: mian}\n",
        "config.yaml:3:29: agents.routes[0].agent: unknown agent 'mian' (did you mean 'main'?), expected 'main' (the only agent while agents.list is empty)",
    );
    assert_error(
        "agents:\n  list: [{name: coder}]\n  default: main\n",
        "config.yaml:3:12: agents.default: unknown agent 'main', expected one of the agents in agents.list: coder",
    );
}

#[test]
fn route_globs_must_not_be_empty() {
    assert_error(
        "agents:\n  routes:\n    - channel: ''\n      sender: ' '\n      agent: main\n",
        "config.yaml:3:16: agents.routes[0].channel: empty pattern, expected a name or a glob such as 'slack*'
config.yaml:4:15: agents.routes[0].sender: empty pattern, expected a name or a glob such as 'team-*'",
    );
}

#[test]
fn an_agent_model_names_a_configured_provider() {
    let text = "\
providers:
  anthropic: {kind: anthropic}
agents:
  list:
    - name: coder
      model: anthropc/claude-opus-4-6
      max_iterations: 0
";
    assert_error(
        text,
        "config.yaml:6:14: agents.list[0].model: unknown provider 'anthropc' (did you mean 'anthropic'?), expected one of the configured providers: anthropic
config.yaml:7:23: agents.list[0].max_iterations: 0 is too small, expected at least 1",
    );
    assert_error(
        "agents:\n  list:\n    - {name: coder, model: claude-opus-4-6}\n",
        "config.yaml:3:28: agents.list[0].model: invalid model 'claude-opus-4-6' (expected 'provider/model', e.g. 'anthropic/claude-sonnet-4-5')",
    );
}

#[test]
fn tool_policy_hooks_and_timeout_are_checked() {
    assert_error(
        "tools:\n  hooks:\n    - {tool: '', action: confirm}\n  confirm_timeout_secs: 0\n",
        "config.yaml:3:14: tools.hooks[0].tool: empty pattern, expected a name or a glob such as 'shell.*'
config.yaml:4:25: tools.confirm_timeout_secs: 0 is too small, expected at least 1",
    );
    assert_error(
        "tools:\n  hooks:\n    - {tool: shell.*, action: ask}\n",
        "config.yaml:3:31: tools.hooks[0].action: unknown hook action 'ask', expected one of: confirm, log, silent",
    );
    assert_error(
        "tools:\n  profile: code\n",
        "config.yaml:2:12: tools.profile: unknown tool profile 'code' (did you mean 'coding'?), expected one of: minimal, messaging, coding, full",
    );
    assert_error(
        "agents:\n  list:\n    - name: chat\n      tools: {profile: messaging, deny: [web.*], allow: [x]}\n",
        "config.yaml:4:50: agents.list[0].tools.allow: unknown key 'allow', expected one of: profile, enabled, deny, autonomy, taint",
    );
}

#[test]
fn tool_overrides_search_backend_and_limits_are_checked() {
    assert_error(
        "providers:\n  ollama: {kind: ollama}\ntools:\n  providers:\n    olama: {profile: minimal}\n",
        "config.yaml:5:12: tools.providers.olama: unknown provider 'olama' (did you mean 'ollama'?), expected one of the configured providers: ollama",
    );
    assert_error(
        "tools:\n  web_search: {provider: brave}\n",
        "config.yaml:2:26: tools.web_search.provider: brave needs tools.web_search.api_key (e.g. ${BRAVE_SEARCH_API_KEY})",
    );
    assert_error(
        "tools:\n  web_search: {provider: searxng}\n",
        "config.yaml:2:26: tools.web_search.provider: searxng needs tools.web_search.endpoint, the instance's URL (e.g. http://searxng:8080)",
    );
    assert_error(
        "tools:\n  web_search: {provider: searxng, endpoint: searx.lan}\n",
        "config.yaml:2:45: tools.web_search.endpoint: invalid URL 'searx.lan', expected an http:// or https:// URL with a host",
    );
    assert_error(
        "tools:\n  autonomy: yolo\n  process: {max_processes: 0, buffer_bytes: 10}\n",
        "config.yaml:2:13: tools.autonomy: unknown autonomy 'yolo', expected one of: read_only, supervised, full",
    );
    assert_error(
        "tools:\n  process: {max_processes: 0, buffer_bytes: 10}\n  sandbox: {mode: bwrap}\n",
        "config.yaml:3:19: tools.sandbox.mode: unknown sandbox mode 'bwrap', expected one of: auto, bubblewrap, docker, landlock, none",
    );
    assert_error(
        "tools:\n  process: {max_processes: 0, buffer_bytes: 10}\n",
        "config.yaml:2:28: tools.process.max_processes: 0 is too small, expected at least 1
config.yaml:2:45: tools.process.buffer_bytes: 10 is too small, expected at least 1024",
    );
}

#[test]
fn sessions_url_must_be_sqlite_or_postgres() {
    assert_error(
        "sessions:\n  url: postgres:///flynn\n",
        "config.yaml:2:8: sessions.url: a PostgreSQL URL is 'postgres://' and a server, expected postgres://user:password@host:5432/database",
    );
    assert_error(
        "sessions:\n  url: mysql://db.internal/flynn\n",
        "config.yaml:2:8: sessions.url: unsupported URL scheme 'mysql:', expected sqlite:///absolute/path.db or sqlite://relative/path.db, or postgres://user:password@host:5432/database",
    );
    assert_error(
        "sessions:\n  url: /var/lib/flynn/sessions.db\n",
        "config.yaml:2:8: sessions.url: not a URL, expected sqlite:///absolute/path.db or sqlite://relative/path.db (a plain file path goes in sessions.database)",
    );
    assert_error(
        "sessions:\n  url: 'sqlite://'\n",
        "config.yaml:2:8: sessions.url: a SQLite URL is 'sqlite://' and a file path, expected sqlite:///absolute/path.db or sqlite://relative/path.db",
    );
}

#[test]
fn a_secret_in_a_sessions_url_from_the_environment_is_not_shown() {
    let env = MapEnv::new().with("DATABASE_URL", "pgsql://flynn:hunter2@db/flynn");
    assert_eq!(
        crate::parse_with("sessions:\n  url: ${DATABASE_URL}\n", &env),
        Err("config.yaml:2:8: sessions.url: unsupported URL scheme 'pgsql:', expected sqlite:///absolute/path.db or sqlite://relative/path.db, or postgres://user:password@host:5432/database".to_owned())
    );
    let env = MapEnv::new().with("DATABASE_URL", "postgres://flynn:hunter2@db/flynn");
    assert!(crate::parse_with("sessions:\n  url: ${DATABASE_URL}\n", &env).is_ok());
}

#[test]
fn sessions_url_and_database_are_alternatives() {
    assert_error(
        "sessions:\n  url: sqlite:///srv/flynn/sessions.db\n  database: /srv/flynn/other.db\n",
        "config.yaml:3:13: sessions.database: 'database' and 'url' cannot both be set, expected only one of them: keep one and remove the other",
    );
    assert_error(
        "sessions:\n  database: /srv/flynn/other.db\n  url: sqlite://sessions.db\n",
        "config.yaml:3:8: sessions.url: 'url' and 'database' cannot both be set, expected only one of them: keep one and remove the other",
    );
}

#[test]
fn session_retention_is_one_day_to_a_century() {
    assert_error(
        "sessions:\n  retention_days: 0\n",
        "config.yaml:2:19: sessions.retention_days: 0 is out of range, expected 1 to 36500",
    );
    assert_error(
        "sessions:\n  retention_days: 100000\n",
        "config.yaml:2:19: sessions.retention_days: 100000 is out of range, expected 1 to 36500",
    );
}

#[test]
fn session_lane_limits_are_at_least_one() {
    assert_error(
        "sessions:\n  queue_limit: 0\n  lane_idle_secs: 0\n  interrupted_turns: report\n",
        "config.yaml:2:16: sessions.queue_limit: 0 is too small, expected at least 1
config.yaml:3:19: sessions.lane_idle_secs: 0 is too small, expected at least 1",
    );
    assert_error(
        "sessions:\n  interrupted_turns: retry\n",
        "config.yaml:2:22: sessions.interrupted_turns: unknown interrupted turns 'retry', expected one of: report, rerun",
    );
}

#[test]
fn memory_embeddings_are_checked() {
    assert_error(
        "providers:\n  ollama: {kind: ollama}\nmemory:\n  embeddings: {kind: ollama, provider: olama}\n",
        "config.yaml:4:40: memory.embeddings.provider: unknown provider 'olama' (did you mean 'ollama'?), expected one of the configured providers: ollama",
    );
    assert_error(
        "memory:\n  embeddings: {kind: voyage}\n",
        "config.yaml:2:22: memory.embeddings.kind: voyage embeddings need memory.embeddings.api_key (e.g. ${VOYAGE_API_KEY})",
    );
    assert_error(
        "memory:\n  embeddings: {kind: local, batch_size: 0}\n",
        "config.yaml:2:22: memory.embeddings.kind: local embeddings need memory.embeddings.model_dir: the directory scripts/fetch-minilm.sh fills
config.yaml:2:41: memory.embeddings.batch_size: 0 is too small, expected at least 1",
    );
    assert_error(
        "memory:\n  embeddings: {kind: openai, base_url: localhost:8080}\n",
        "config.yaml:2:40: memory.embeddings.base_url: invalid URL 'localhost:8080', expected an http:// or https:// URL with a host",
    );
    assert_error(
        "memory:\n  embeddings: {kind: bert}\n",
        "config.yaml:2:22: memory.embeddings.kind: unknown embedder kind 'bert', expected one of: openai, ollama, gemini, voyage, local",
    );
}

#[test]
fn channels_say_which_setting_is_missing_and_where() {
    assert_error(
        "channels:\n  telegram:\n    bot_token: \"\"\n",
        "config.yaml:3:16: channels.telegram.bot_token: empty: paste the token @BotFather gave (or `${TELEGRAM_BOT_TOKEN}`)",
    );
    assert_error(
        "channels:\n  slack:\n    bot_token: xoxb-1\n",
        "config.yaml:3:5: channels.slack.app_token: needed with mode: socket: an app-level token with connections:write (xapp-…); or use mode: events",
    );
    assert_error(
        "channels:\n  telegram:\n    bot_token: 1:x\n    mode: webhook\n    webhook_url: https://bot.example.com/channels/telegram/webhook\n    webhook_secret: has spaces\n",
        "config.yaml:6:21: channels.telegram.webhook_secret: needed with mode: webhook: 1-256 characters of A-Z a-z 0-9 _ - (`openssl rand -hex 32`)",
    );
    // The keys every channel shares sit next to the platform's own.
    assert_error(
        "channels:\n  discord:\n    bot_token: x\n    dm_policy: anyone\n",
        "config.yaml:4:16: channels.discord.dm_policy: unknown dm policy 'anyone', expected one of: pairing, allowlist, open",
    );
    assert!(
        parse(
            "channels:\n  whatsapp:\n    access_token: t\n    phone_number_id: \"1\"\n    app_secret: s\n    verify_token: v\n    allow_from: [\"15551234567\"]\n    rate_limit: {messages: 5, per_secs: 60}\n"
        )
        .is_ok()
    );
}

#[test]
fn automation_jobs_are_checked_at_their_keys() {
    let job = |extra: &str| {
        format!(
            "automation:\n  jobs:\n    - name: brief\n      schedule: \"30 7 * * *\"\n      message: morning brief\n{extra}"
        )
    };
    let shape = "expected 5 fields `minute hour day-of-month month day-of-week` (`30 7 * * MON-FRI`) or 6 with seconds first (`0 30 7 * * *`)";
    assert_error(
        "automation:\n  jobs:\n    - name: brief\n      schedule: \"30 7 * *\"\n      message: hi\n",
        &format!(
            "config.yaml:4:17: automation.jobs[0].schedule: invalid cron expression '30 7 * *': 4 fields; {shape}"
        ),
    );
    assert_error(
        "automation:\n  jobs:\n    - name: brief\n      schedule: \"61 7 * * *\"\n      message: hi\n",
        &format!(
            "config.yaml:4:17: automation.jobs[0].schedule: invalid cron expression '61 7 * * *': Component error: Number out of bounds; {shape}"
        ),
    );
    // The daemon refuses an empty item between commas (croner would read it
    // as a field that never matches), so the file's check does too.
    assert_error(
        "automation:\n  jobs:\n    - name: brief\n      schedule: \"0 1,,2 * * *\"\n      message: hi\n",
        &format!(
            "config.yaml:4:17: automation.jobs[0].schedule: invalid cron expression '0 1,,2 * * *': the hours field '1,,2' has an empty item between commas; {shape}"
        ),
    );
    assert_error(
        &job("      timezone: Europe/Berln\n"),
        "config.yaml:6:17: automation.jobs[0].timezone: unknown time zone 'Europe/Berln' (did you mean 'Europe/Berlin'?), expected an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`",
    );
    assert_error(
        &job("      deliver_to: telegram\n"),
        "config.yaml:6:19: automation.jobs[0].deliver_to: 'telegram' is not a session key: missing ':' between channel and peer, expected `<channel>:<peer>` (`telegram:123456789`)",
    );
    assert_error(
        &job("    - name: brief\n      schedule: \"0 9 * * *\"\n      message: again\n"),
        "config.yaml:6:13: automation.jobs[1].name: duplicate job name 'brief': every job in automation.jobs needs its own name",
    );
    assert_error(
        "automation:\n  heartbeat:\n    every_mins: 0\n",
        "config.yaml:3:17: automation.heartbeat.every_mins: 0 is too small, expected at least 1",
    );
    assert_error(
        "automation:\n  jobs:\n    - name: morning brief\n      schedule: \"30 7 * * *\"\n      message: hi\n",
        "config.yaml:3:13: automation.jobs[0].name: job name 'morning brief': has other characters; expected 1 to 64 letters, digits, '-', '_' or '.' (`morning-brief`)",
    );
    assert_error(
        &job("      agent: mian\n"),
        "config.yaml:6:14: automation.jobs[0].agent: unknown agent 'mian' (did you mean 'main'?), expected 'main' (the only agent while agents.list is empty)",
    );
    // Answers go out through a configured chat channel.
    assert_error(
        &job("      deliver_to: \"telegram:123456789\"\n"),
        "config.yaml:6:19: automation.jobs[0].deliver_to: 'telegram:123456789' names the channel 'telegram', which is not configured (chat channels: none); answers are delivered through a configured chat channel: add channels.telegram, or deliver to one that is",
    );
    assert_error(
        "channels:\n  telegram:\n    bot_token: \"1:x\"\nautomation:\n  heartbeat:\n    enabled: true\n    deliver_to: \"telegrm:42\"\n",
        "config.yaml:7:17: automation.heartbeat.deliver_to: 'telegrm:42' names the channel 'telegrm' (did you mean 'telegram'?), which is not configured (chat channels: telegram); answers are delivered through a configured chat channel: add channels.telegrm, or deliver to one that is",
    );
    let telegram = "channels:\n  telegram:\n    bot_token: \"1:x\"\n";
    assert!(
        parse(&format!(
            "{telegram}{}",
            job("      timezone: America/New_York\n      deliver_to: \"telegram:123456789\"\n      missed: run_once\n      agent: main\n")
        ))
        .is_ok()
    );
}

#[test]
fn mcp_servers_are_checked_at_their_keys() {
    // The shape other MCP clients write loads as it is.
    let loaded = parse(
        "mcp:\n  servers:\n    files:\n      command: npx\n      args: ['-y', '@modelcontextprotocol/server-filesystem', '/tmp']\n    remote:\n      type: http\n      url: https://mcp.example.com/mcp\n      headers: {Authorization: 'Bearer abcdefgh123'}\n",
    )
    .unwrap();
    assert_eq!(loaded.mcp.servers.len(), 2);
    assert!(loaded.secrets().contains(&"Bearer abcdefgh123".to_owned()));
    assert_error(
        "mcp:\n  servers:\n    file:\n      command: x\n",
        "config.yaml:4:7: mcp.servers.file: server name 'file' is taken by Flynn's built-in `file.*` tools; choose another (reserved: agents, browser, cron, file, mcp, media, memory, process, sessions, shell, skills, tool, tools, voice, web)",
    );
    assert_error(
        "automation:\n  gmail:\n    deliver_to: telegram:1\n",
        "config.yaml:3:5: automation.gmail: a Gmail watch reads a mailbox through the `google` block, which is missing (see docs/google.md)",
    );
    assert_error(
        "gateway:\n  webhooks:\n    ci:\n      secret: \"0123456789abcdef0123456789abcdef\"\n      deliver_to: slack:C1\n",
        "config.yaml:5:19: gateway.webhooks.ci.deliver_to: 'slack:C1' names the channel 'slack', which is not configured (chat channels: none); answers are delivered through a configured chat channel: add channels.slack, or deliver to one that is",
    );
    // A Gmail MCP server keeps its name until Flynn's own Google tools
    // are configured.
    assert!(parse("mcp:\n  servers:\n    gmail:\n      command: x\n").is_ok());
    assert_error(
        "google: {}\nmcp:\n  servers:\n    gmail:\n      command: x\n",
        "config.yaml:5:7: mcp.servers.gmail: server name 'gmail' is taken by Flynn's built-in `gmail.*` tools; choose another (reserved: agents, browser, calendar, cron, docs, drive, file, gmail, mcp, media, memory, process, sessions, shell, skills, tasks, tool, tools, voice, web)",
    );
    assert_error(
        "mcp:\n  servers:\n    git.hub:\n      command: x\n",
        "config.yaml:4:7: mcp.servers[\"git.hub\"]: server name 'git.hub' cannot prefix its tools: use letters, digits, `-` and `_` (its tools are offered as `<name>.<tool>`)",
    );
    assert_error(
        "mcp:\n  servers:\n    gh:\n      args: [x]\n",
        "config.yaml:4:7: mcp.servers.gh.command: missing: a stdio server needs the program to start (`command: npx`), or give `url` for an HTTP server",
    );
    assert_error(
        "mcp:\n  servers:\n    gh:\n      url: ftp://example.com\n",
        "config.yaml:4:12: mcp.servers.gh.url: invalid URL 'ftp://example.com', expected an http:// or https:// URL with a host",
    );
    assert_error(
        "mcp:\n  servers:\n    gh:\n      command: x\n      url: https://example.com/mcp\n",
        "config.yaml:5:12: mcp.servers.gh.url: `url` is for HTTP servers, and this one is started with `command` (stdio): keep one of the two",
    );
    assert_error(
        "mcp:\n  servers:\n    gh:\n      type: sse\n      url: https://example.com/sse\n",
        "config.yaml:4:13: mcp.servers.gh.type: `sse` (the older HTTP+SSE transport) is not supported: use the server's streamable HTTP endpoint with `type: http`, or run it over stdio",
    );
    assert_error(
        "mcp:\n  servers:\n    gh:\n      command: x\n      timeout_secs: 0\n",
        "config.yaml:5:21: mcp.servers.gh.timeout_secs: 0 is too small, expected at least 1",
    );
}

#[test]
fn short_tokens_and_webhook_secrets_are_refused_by_their_key() {
    assert_error(
        "gateway:\n  token: short\n",
        "config.yaml:2:10: gateway.token: the token is 5 characters; expected at least 32 (make one with `openssl rand -hex 32`)",
    );
    assert_error(
        "gateway:\n  webhooks:\n    ci: {secret: \"\"}\n",
        "config.yaml:3:18: gateway.webhooks.ci.secret: the secret is 0 bytes; expected at least 32 (`openssl rand -hex 32`): anyone can sign with an empty or short one",
    );
    assert_error(
        "gateway:\n  tokens:\n    - {name: ide, token: abc, scopes: [chat]}\n",
        "config.yaml:3:26: gateway.tokens[0].token: the token is 3 characters; expected at least 32 (`flynn token create` makes one)",
    );
    assert_error(
        "gateway:\n  tokens:\n    - {name: \"i de\", token_file: /x, scopes: []}\n",
        "config.yaml:3:14: gateway.tokens[0].name: token name 'i de' is not usable: expected 1 to 32 letters, digits, `-` or `_`\nconfig.yaml:3:46: gateway.tokens[0].scopes: expected at least one scope: chat, read, approve or admin",
    );
    assert_error(
        "gateway:\n  tokens:\n    - {name: ide, scopes: [chat]}\n",
        "config.yaml:3:7: gateway.tokens[0]: expected `token` (the secret) or `token_file` (a file holding it)",
    );
}

#[test]
fn tailscale_users_need_a_listener_of_their_own_and_a_name() {
    assert_error(
        "gateway:\n  tailscale:\n    users: [alice@example.com]\n",
        "config.yaml:3:5: gateway.tailscale.listen: gateway.tailscale.users needs a listener only `tailscale serve` targets: set listen to `unix:/run/flynn/ts.sock` (or a loopback host:port) and run `tailscale serve unix:/run/flynn/ts.sock`\nconfig.yaml:3:5: gateway.tailscale.host: expected the gateway's Tailscale name, e.g. `box.tailnet.ts.net` (`tailscale status --self`)",
    );
    assert_error(
        "gateway:\n  tailscale:\n    users: [a@b.c]\n    listen: 0.0.0.0:9\n    host: box.t.ts.net\n",
        "config.yaml:4:13: gateway.tailscale.listen: '0.0.0.0:9' is not a Tailscale listener: expected `unix:/absolute/path.sock` or a loopback address such as `127.0.0.1:18801`",
    );
    // The old form still loads (the daemon warns and ignores it on the
    // main listener).
    assert!(parse("gateway:\n  tailscale_users: [a@b.c]\n").is_ok());
}
