use flynn_core::config::{self, ProcessEnv, Source};

use crate::cli::{ConfigArgs, ConfigCommand};
use crate::exit::Failure;

pub fn run(args: ConfigArgs) -> Result<(), Failure> {
    match args.command {
        ConfigCommand::Validate { file } => {
            let loaded = config::load(file.as_deref(), &ProcessEnv)?;
            match loaded.source {
                Source::File(path) => println!("{}: ok", path.display()),
                Source::Environment => println!(
                    "no config file at {}: using the environment, ok",
                    loaded.paths.config_file.display()
                ),
            }
            Ok(())
        }
        ConfigCommand::Schema => {
            print!("{}", config::schema_json());
            Ok(())
        }
    }
}
