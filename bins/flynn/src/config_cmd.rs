use flynn_core::config::{self, Source};

use crate::env::CliEnv;

use crate::cli::{ConfigArgs, ConfigCommand};
use crate::exit::Failure;

pub fn run(args: ConfigArgs) -> Result<(), Failure> {
    match args.command {
        ConfigCommand::Validate { file } => {
            let loaded = config::load(file.as_deref(), &CliEnv)?;
            match loaded.source {
                Source::File(path) => match &loaded.overlay {
                    Some(overlay) => outln!(
                        "{} with profile {} ({}): ok",
                        path.display(),
                        overlay.profile,
                        overlay.file.display()
                    ),
                    None => outln!("{}: ok", path.display()),
                },
                Source::Environment => outln!(
                    "no config file at {}: using the environment, ok",
                    loaded.paths.config_file.display()
                ),
            }
            Ok(())
        }
        ConfigCommand::Schema => {
            out!("{}", config::schema_json());
            Ok(())
        }
        ConfigCommand::Get {
            path,
            json,
            origin,
            config,
        } => {
            let loaded = config::load(config.as_deref(), &CliEnv)?;
            if origin {
                return print_origins(&loaded, &path, json);
            }
            let value = config::masked(&loaded.config);
            let found = config::lookup(&value, &path)
                .map_err(|e| Failure::usage(format!("config get: {e}")))?;
            match found {
                serde_json::Value::String(text) if !json => outln!("{text}"),
                other => outln!(
                    "{}",
                    serde_json::to_string_pretty(other).unwrap_or_default()
                ),
            }
            Ok(())
        }
        ConfigCommand::Migrate { dry_run, config } => {
            let paths = config::Paths::resolve(config.as_deref(), &CliEnv)?;
            let file = paths.config_file;
            if !file.exists() {
                return Err(Failure::usage(format!(
                    "{}: no such config file (nothing to migrate)",
                    file.display()
                )));
            }
            let report = config::migrate::migrate_file(&file, &CliEnv, dry_run)?;
            if report.changes.is_empty() {
                outln!(
                    "{}: already version {}, nothing to do",
                    file.display(),
                    report.to
                );
                return Ok(());
            }
            let verb = if dry_run { "would migrate" } else { "migrated" };
            outln!(
                "{}: {verb} from version {} to {}",
                file.display(),
                report.from,
                report.to
            );
            for change in &report.changes {
                outln!("  {change}");
            }
            if let Some(backup) = &report.backup {
                outln!("the old file is kept as {}", backup.display());
            }
            Ok(())
        }
        ConfigCommand::Set {
            path,
            value,
            config,
        } => {
            let paths = config::Paths::resolve(config.as_deref(), &CliEnv)?;
            let file = paths.config_file;
            if !file.exists() {
                std::fs::write(&file, "").map_err(|e| {
                    Failure::usage(format!("cannot create {}: {e}", file.display()))
                })?;
            }
            let value = config::edit::parse_cli_value(&value);
            config::edit::set_in_file(&file, &[(path.clone(), value)], &CliEnv)?;
            outln!("{}: set {path}", file.display());
            Ok(())
        }
    }
}

/// `config get --origin`: each value under `path` with where it came from.
fn print_origins(loaded: &config::Loaded, path: &str, json: bool) -> Result<(), Failure> {
    let values =
        config::origins(loaded, path).map_err(|e| Failure::usage(format!("config get: {e}")))?;
    if json {
        let list: Vec<serde_json::Value> = values
            .iter()
            .map(|v| {
                let origin = match &v.origin {
                    config::Origin::File { path, line } => {
                        serde_json::json!({"file": path, "line": line})
                    }
                    config::Origin::Env { variables } => serde_json::json!({"env": variables}),
                    config::Origin::Default => serde_json::json!("default"),
                };
                serde_json::json!({"path": v.path, "value": v.value, "origin": origin})
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
        return Ok(());
    }
    for value in values {
        let shown = match &value.value {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        outln!("{}: {shown}  ({})", value.path, value.origin);
    }
    Ok(())
}
