//! `flynn backup` and `flynn restore`: see `flynn_core::backup`.

use flynn_core::backup::{self, Layout};
use flynn_core::config;

use crate::cli::BackupArgs;
use crate::env::CliEnv;
use crate::exit::Failure;

fn layout(args: &BackupArgs) -> Result<Layout, Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let config_file = Some(loaded.paths.config_file.as_path()).filter(|file| file.is_file());
    Ok(Layout::resolve(
        &loaded.config,
        &loaded.paths.home,
        config_file,
    )?)
}

pub async fn backup(args: BackupArgs) -> Result<(), Failure> {
    let layout = layout(&args)?;
    let report = backup::backup(&layout, &args.file).await?;
    outln!(
        "backed up {} files to {}",
        report.files.len(),
        report.archive.display()
    );
    Ok(())
}

pub async fn restore(args: BackupArgs) -> Result<(), Failure> {
    let layout = layout(&args)?;
    let report = backup::restore(&layout, &args.file).await?;
    outln!(
        "restored {} files from {}; what they replaced is in {}",
        report.files.len(),
        args.file.display(),
        report.aside.display()
    );
    Ok(())
}
