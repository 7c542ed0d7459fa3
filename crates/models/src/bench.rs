//! A hook for `benches/sse.rs`: the real server-sent event parsing path
//! (the SSE parser, each vendor's assembler, the stream loop every call
//! goes through) fed from memory instead of a socket. Not part of the API.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::anthropic::wire::MessagesAssembler;
use crate::http::sse_stream;
use crate::openai::wire::ChatAssembler;
use crate::{Result, StreamEvent, ToolNameMap};

/// Which vendor's stream the bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Chat Completions chunks.
    OpenAi,
    /// Messages API events.
    Anthropic,
}

/// Parses a recorded stream delivered in `chunks`, as the network would
/// deliver it, and returns how many events it yielded (the deltas and the
/// final `Completed`). An error in the stream is returned as such.
pub async fn parse(wire: Wire, chunks: Vec<Bytes>) -> Result<usize> {
    let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, reqwest::Error>));
    let provider = "bench".to_owned();
    let timeout = Duration::from_secs(60);
    let mut stream = match wire {
        Wire::OpenAi => sse_stream(
            provider,
            timeout,
            // No idle timer: the fuzz target runs this without a Tokio
            // runtime.
            None,
            body,
            ChatAssembler::new("bench", "bench-model", ToolNameMap::default()),
        ),
        Wire::Anthropic => sse_stream(
            provider,
            timeout,
            // No idle timer: the fuzz target runs this without a Tokio
            // runtime.
            None,
            body,
            MessagesAssembler::new("bench", "bench-model", ToolNameMap::default()),
        ),
    };
    let mut events = 0;
    while let Some(event) = stream.next().await {
        let completed = matches!(event?, StreamEvent::Completed(_));
        events += 1;
        if completed {
            break;
        }
    }
    Ok(events)
}
