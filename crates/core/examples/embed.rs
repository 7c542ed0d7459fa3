//! Embeds Flynn: `cargo run -p flynn-core --example embed -- "hello"`.
use flynn_core::{AgentEvent, Flynn, TurnRequest, config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let loaded = config::load(None, &config::ProcessEnv)?;
    let flynn = Flynn::builder()
        .config(loaded.config)
        .home(loaded.paths.home)
        .build()
        .await?;
    let text = std::env::args().nth(1).unwrap_or_else(|| "hello".into());
    let turn = TurnRequest::text("example:embed".parse()?, text);
    let outcome = flynn
        .send(turn, Default::default(), &mut |event| {
            if let AgentEvent::ContentDelta { text } = event {
                print!("{text}");
            }
        })
        .await?;
    println!("\n[{}/{}]", outcome.provider, outcome.model);
    Ok(())
}
