use anyhow::Result;

/// Writes every generated file.
pub fn run() -> Result<()> {
    let root = crate::project_root();
    let files = [
        ("config/flynn.schema.json", flynn_config::schema_json()),
        (
            "docs/protocol.schema.json",
            flynn_api::schema::protocol_schema_json(),
        ),
    ];
    for (path, content) in files {
        let path = root.join(path);
        std::fs::write(&path, content)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
