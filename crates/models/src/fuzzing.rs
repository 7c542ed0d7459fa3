//! Entry points for `flynn-fuzz` (the fuzz targets and their corpus
//! replay): the parsers of what vendors send, reachable from outside the
//! crate. Not part of the API.

use std::time::Duration;

use eventsource_stream::Event;
use reqwest::header::HeaderMap;

use crate::anthropic::wire::MessagesAssembler;
use crate::bench::Wire;
use crate::http::{Assembler, Fed, VendorError};
use crate::openai::wire::ChatAssembler;
use crate::{Result, ToolNameMap};

/// How long the server asked us to wait (`retry-after-ms`, `Retry-After`).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    crate::http::retry_after(headers)
}

/// An error body read as the vendor's error: (message, type, code).
pub fn vendor_error(body: &str) -> (String, Option<String>, Option<String>) {
    let error = VendorError::parse(body);
    (error.message, error.kind, error.code)
}

/// Feeds `(event name, data)` pairs straight to a vendor's assembler, as
/// the SSE loop does, and finishes it. Gives how many deltas it yielded.
pub fn assemble(wire: Wire, events: &[(String, String)]) -> Result<usize> {
    match wire {
        Wire::OpenAi => run(
            ChatAssembler::new("fuzz", "fuzz-model", ToolNameMap::default()),
            events,
        ),
        Wire::Anthropic => run(
            MessagesAssembler::new("fuzz", "fuzz-model", ToolNameMap::default()),
            events,
        ),
    }
}

fn run(mut assembler: impl Assembler, events: &[(String, String)]) -> Result<usize> {
    let mut out = Vec::new();
    let mut deltas = 0;
    for (name, data) in events {
        let event = Event {
            event: name.clone(),
            data: data.clone(),
            ..Event::default()
        };
        let fed = assembler.feed(&event, &mut out)?;
        deltas += out.len();
        out.clear();
        if fed == Fed::Done {
            assembler.finish(true)?;
            return Ok(deltas);
        }
    }
    assembler.finish(false)?;
    Ok(deltas)
}
