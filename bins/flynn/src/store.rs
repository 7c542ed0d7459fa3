//! `flynn store copy`: moves every session, turn, usage record, pairing
//! and job from one session store into another, empty one (see
//! `flynn_sessions::copy`).

use std::path::PathBuf;

use flynn_core::protocol::config::SessionsConfig;
use flynn_core::sessions::{self, StoreLocation};

use crate::cli::{StoreArgs, StoreCommand};
use crate::exit::Failure;

pub async fn run(args: StoreArgs) -> Result<(), Failure> {
    match args.command {
        StoreCommand::Copy { from, to } => {
            let from = store_arg("FROM", &from)?;
            let to = store_arg("TO", &to)?;
            let report = sessions::copy(&from, &to)
                .await
                .map_err(|e| Failure::other(e.to_string()))?;
            outln!(
                "copied {report} from {} to {}",
                from.redacted(),
                to.redacted()
            );
            // Memory is not part of the session store's copy.
            match (&from, &to) {
                (StoreLocation::Sqlite(_), StoreLocation::Postgres(_)) => outln!(
                    "memory: with the sessions in PostgreSQL, memory is kept there too; once sessions.url points at it, move the memory files in with `flynn memory import <memory dir>`"
                ),
                (StoreLocation::Postgres(_), StoreLocation::Sqlite(_)) => outln!(
                    "memory: it stays in PostgreSQL; write its files out with `flynn memory export <dir>` before sessions.url stops pointing there, then put them in memory.dir"
                ),
                _ => {}
            }
            Ok(())
        }
    }
}

/// A store named on the command line: a `sqlite://` or `postgres://` URL
/// (as `sessions.url` takes), or a SQLite file's path.
fn store_arg(name: &str, text: &str) -> Result<StoreLocation, Failure> {
    let config = if text.contains("://") {
        SessionsConfig {
            url: Some(text.to_owned()),
            ..SessionsConfig::default()
        }
    } else {
        SessionsConfig {
            database: Some(PathBuf::from(text)),
            ..SessionsConfig::default()
        }
    };
    sessions::location(&config, std::path::Path::new("."))
        .map_err(|e| Failure::usage(format!("{name}: {e}")))
}
