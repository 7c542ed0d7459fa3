use flynn_core::config::{self, ProcessEnv, Source};

use crate::cli::{ConfigArgs, ConfigCommand};
use crate::exit::Failure;

pub fn run(args: ConfigArgs) -> Result<(), Failure> {
    match args.command {
        ConfigCommand::Validate { file } => {
            let loaded = config::load(file.as_deref(), &ProcessEnv)?;
            match loaded.source {
                Source::File(path) => outln!("{}: ok", path.display()),
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
        ConfigCommand::Get { path, json, config } => {
            let loaded = config::load(config.as_deref(), &ProcessEnv)?;
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
        ConfigCommand::Set {
            path,
            value,
            config,
        } => {
            let paths = config::Paths::resolve(config.as_deref(), &ProcessEnv)?;
            let file = paths.config_file;
            if !file.exists() {
                std::fs::write(&file, "").map_err(|e| {
                    Failure::usage(format!("cannot create {}: {e}", file.display()))
                })?;
            }
            let value = config::edit::parse_cli_value(&value);
            config::edit::set_in_file(&file, &[(path.clone(), value)], &ProcessEnv)?;
            outln!("{}: set {path}", file.display());
            Ok(())
        }
    }
}
