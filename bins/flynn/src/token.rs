//! `flynn token`: gateway tokens with fewer rights than the owner's, for
//! an IDE, a script, an OpenAI or MCP client. A new token's secret goes
//! to `FLYNN_HOME/tokens/<name>.token` (mode 0600, the directory 0700),
//! never into the config file, which may be shared or backed up: the
//! config's `gateway.tokens` entry names the file. The secret is printed
//! once; `list` never shows one.

use std::io::Write;
use std::path::{Path, PathBuf};

use flynn_core::config::{self, Source};
use flynn_core::protocol::config::TokenScope;
use serde_json::{Value, json};

use crate::cli::{TokenArgs, TokenCommand};
use crate::env::CliEnv;
use crate::exit::Failure;

pub fn run(args: TokenArgs) -> Result<(), Failure> {
    match args.command {
        TokenCommand::Create { name, scopes, json } => {
            create(args.config.as_deref(), &name, &scopes, json)
        }
        TokenCommand::List { json } => list(args.config.as_deref(), json),
        TokenCommand::Revoke { name } => revoke(args.config.as_deref(), &name),
    }
}

fn scope(text: &str) -> Result<TokenScope, Failure> {
    TokenScope::ALL
        .into_iter()
        .find(|s| s.as_str() == text)
        .ok_or_else(|| {
            Failure::usage(format!(
                "unknown scope '{text}' (expected chat, read, approve or admin)"
            ))
        })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name != flynn_core::gateway::ADMIN_TOKEN_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The config file (created empty when missing) and its
/// `gateway.tokens` as written (no `${VAR}` expanded).
fn tokens_as_written(explicit: Option<&Path>) -> Result<(PathBuf, PathBuf, Vec<Value>), Failure> {
    let paths = config::Paths::resolve(explicit, &CliEnv)?;
    let file = paths.config_file;
    if !file.exists() {
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Failure::usage(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(&file, "")
            .map_err(|e| Failure::usage(format!("cannot create {}: {e}", file.display())))?;
    }
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
    let raw = config::edit::unexpanded(&text)
        .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    let tokens = raw
        .get("gateway")
        .and_then(|g| g.get("tokens"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok((file, paths.home, tokens))
}

fn create(
    explicit: Option<&Path>,
    name: &str,
    scopes: &[String],
    json: bool,
) -> Result<(), Failure> {
    if !valid_name(name) {
        return Err(Failure::usage(format!(
            "token name '{name}' is not usable: expected 1 to 32 letters, digits, `-` or `_`, not `default` (the admin token's name)"
        )));
    }
    let mut wanted: Vec<TokenScope> = Vec::new();
    for text in scopes {
        let scope = scope(text)?;
        if !wanted.contains(&scope) {
            wanted.push(scope);
        }
    }
    if wanted.is_empty() {
        return Err(Failure::usage(
            "give at least one --scope: chat, read, approve or admin",
        ));
    }
    let (file, home, mut tokens) = tokens_as_written(explicit)?;
    let secret = flynn_core::gateway::generate_token()
        .map_err(|e| Failure::usage(format!("cannot make a random token: {e}")))?;
    let dir = home.join("tokens");
    let path = dir.join(format!("{name}.token"));
    write_private(&dir, &path, &secret)?;
    let entry = json!({
        "name": name,
        "token_file": path.display().to_string(),
        "scopes": wanted.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
    });
    let replaced = match tokens.iter().position(|t| t["name"] == name) {
        Some(index) => {
            tokens[index] = entry;
            true
        }
        None => {
            tokens.push(entry);
            false
        }
    };
    config::edit::set_in_file(
        &file,
        &[("gateway.tokens".to_owned(), Value::Array(tokens))],
        &CliEnv,
    )?;
    let scope_list = wanted
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if json {
        outln!(
            "{}",
            json!({"name": name, "token": secret, "token_file": path, "scopes": scope_list.split(", ").collect::<Vec<_>>(), "replaced": replaced})
        );
    } else {
        outln!("{secret}");
        eprintln!(
            "{} token '{name}' ({scope_list}): kept in {}, listed in {} (gateway.tokens); restart the daemon to use it. This is the only time it is shown.",
            if replaced { "replaced" } else { "made" },
            path.display(),
            file.display()
        );
    }
    Ok(())
}

fn write_private(dir: &Path, path: &Path, secret: &str) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::usage(format!("cannot write {}: {e}", path.display()));
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(fail)?;
    let temp = dir.join(format!(
        ".{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("token"),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let _ = std::fs::remove_file(&temp);
    let mut out = options.open(&temp).map_err(fail)?;
    out.write_all(secret.as_bytes()).map_err(fail)?;
    out.write_all(b"\n").map_err(fail)?;
    out.sync_all().map_err(fail)?;
    std::fs::rename(&temp, path).map_err(fail)
}

fn list(explicit: Option<&Path>, json: bool) -> Result<(), Failure> {
    let loaded = config::load(explicit, &CliEnv)?;
    let tokens = &loaded.config.gateway.tokens;
    let default_from = if loaded.config.gateway.token.is_some() {
        "gateway.token"
    } else {
        "FLYNN_GATEWAY_TOKEN or FLYNN_HOME/gateway.token"
    };
    if json {
        let mut all =
            vec![json!({"name": "default", "scopes": ["admin"], "kept_in": default_from})];
        all.extend(tokens.iter().map(|t| {
            json!({
                "name": t.name,
                "scopes": t.scopes,
                "kept_in": t.token_file.as_ref().map_or_else(|| "the config".to_owned(), |p| p.display().to_string()),
            })
        }));
        outln!("{}", Value::Array(all));
        return Ok(());
    }
    outln!("default  admin  ({default_from})");
    for token in tokens {
        let scopes = token
            .scopes
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let kept = token
            .token_file
            .as_ref()
            .map_or_else(|| "in the config".to_owned(), |p| p.display().to_string());
        outln!("{}  {scopes}  ({kept})", token.name);
    }
    if let Source::Environment = loaded.source {
        eprintln!("no config file: only the default token exists");
    }
    Ok(())
}

fn revoke(explicit: Option<&Path>, name: &str) -> Result<(), Failure> {
    let (file, _, mut tokens) = tokens_as_written(explicit)?;
    let Some(index) = tokens.iter().position(|t| t["name"] == name) else {
        return Err(Failure::usage(format!(
            "no token named '{name}' in gateway.tokens (`flynn token list` shows them)"
        )));
    };
    let removed = tokens.remove(index);
    config::edit::set_in_file(
        &file,
        &[("gateway.tokens".to_owned(), Value::Array(tokens))],
        &CliEnv,
    )?;
    if let Some(path) = removed["token_file"].as_str() {
        let _ = std::fs::remove_file(path);
    }
    outln!("revoked token '{name}'; restart the daemon for it to stop working");
    Ok(())
}
