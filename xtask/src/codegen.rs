use anyhow::Result;

/// Writes every generated file.
pub fn run() -> Result<()> {
    let path = crate::project_root().join("config/flynn.schema.json");
    std::fs::write(&path, flynn_config::schema_json())?;
    println!("wrote {}", path.display());
    Ok(())
}
