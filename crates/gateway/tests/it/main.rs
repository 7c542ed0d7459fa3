//! The gateway as its clients use it: `flynn-client`, the jsonrpsee client
//! over WebSocket and HTTP, raw frames, an independent OpenAI client, signed webhooks,
//! against a runtime on the strict fake OpenAI server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod client;
mod harness;
mod mcp;
mod openai;
mod protocol;
mod security;
mod shutdown;
mod trust;
mod web;

#[test]
fn the_protocol_schema_file_is_up_to_date() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/protocol.schema.json"
    );
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == flynn_api::schema::protocol_schema_json(),
        "docs/protocol.schema.json is stale: run `cargo xtask codegen`"
    );
}

#[test]
fn the_protocol_doc_names_every_method_and_error_code() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/protocol.md"
    ))
    .unwrap();
    let schema = flynn_api::schema::protocol_schema();
    for method in schema["methods"].as_array().unwrap() {
        let name = method["name"].as_str().unwrap();
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/protocol.md does not describe {name}"
        );
        let scope = method["scopes"][0].as_str().unwrap();
        assert!(
            doc.contains(&format!("| `{name}` | {scope}")),
            "docs/protocol.md's scope table does not give {name} its scope `{scope}`"
        );
    }
    for error in schema["errors"].as_array().unwrap() {
        let code = error["code"].as_i64().unwrap();
        assert!(
            doc.contains(&format!("{code}")),
            "docs/protocol.md does not list error {code}"
        );
    }
}
