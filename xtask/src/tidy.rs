use anyhow::Result;
pub fn run() -> Result<()> { Ok(()) }
