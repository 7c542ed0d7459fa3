//! Compaction as the runtime runs it: flynn-context's [`Compactor`] with
//! summaries delegated to the `agents.delegation.compaction` tier.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_context::{
    Budget, CompactionError, CompactionReport, CompactionSettings, Compactor, MemoryFlush,
    Summariser,
};
use flynn_protocol::config::ModelRef;
use flynn_protocol::{AgentEvent, Purpose, SessionKey, Tier};
use tokio_util::sync::CancellationToken;

use crate::delegate::{AgentOrchestrator, SubAgentRequest};
use crate::memory::{Both, Extractor};
use crate::runtime::Shared;
use crate::{Error, Result};

/// Writes summaries by delegating to the compaction tier.
struct Delegated {
    orchestrator: AgentOrchestrator,
    session: SessionKey,
    depth: u32,
    window: usize,
    cancel: CancellationToken,
}

#[async_trait]
impl Summariser for Delegated {
    async fn summarise(
        &self,
        system: &str,
        transcript: &str,
        max_tokens: u32,
    ) -> std::result::Result<String, String> {
        let request = SubAgentRequest {
            max_tokens: Some(max_tokens),
            depth: self.depth,
            ..SubAgentRequest::new(
                Purpose::Compaction,
                self.session.clone(),
                system,
                transcript,
            )
        };
        self.orchestrator
            .delegate(request, &self.cancel)
            .await
            .map(|result| result.content)
            .map_err(|error| error.to_string())
    }

    fn window_tokens(&self) -> usize {
        self.window
    }
}

/// A compactor for one session, its summaries on the compaction tier.
pub(crate) fn compactor(
    shared: &Shared,
    session: &SessionKey,
    depth: u32,
    model: &ModelRef,
    cancel: &CancellationToken,
    extract: bool,
) -> Compactor {
    let config = &shared.compaction;
    let settings = CompactionSettings {
        threshold_pct: config.threshold_pct,
        keep_turns: usize::try_from(config.keep_turns).unwrap_or(usize::MAX),
        timeout: Duration::from_secs(config.timeout_secs),
        summary_max_tokens: config.summary_max_tokens,
    };
    let tier = shared.orchestrator.tier_for(Purpose::Compaction);
    let window = summariser_window(shared, tier);
    let summariser = Delegated {
        orchestrator: shared.orchestrator.clone(),
        session: session.clone(),
        depth,
        window,
        cancel: cancel.clone(),
    };
    let counter = flynn_models::token_counter(shared.router.token_counting(), model.model());
    let compactor = Compactor::new(settings, Arc::new(summariser), counter);
    let extractor: Option<Arc<dyn MemoryFlush>> = shared
        .memory
        .as_ref()
        .filter(|memory| extract && memory.auto_extract)
        .map(|memory| {
            Arc::new(Extractor {
                memory: memory.memory.clone(),
                orchestrator: shared.orchestrator.clone(),
                depth,
                cancel: cancel.clone(),
            }) as Arc<dyn MemoryFlush>
        });
    match (&shared.memory_flush, extractor) {
        (Some(flush), Some(extractor)) => {
            compactor.with_flush(Arc::new(Both(flush.clone(), extractor)))
        }
        (Some(flush), None) => compactor.with_flush(flush.clone()),
        (None, Some(extractor)) => compactor.with_flush(extractor),
        (None, None) => compactor,
    }
}

/// The window of the compaction tier's first model, as known offline.
fn summariser_window(shared: &Shared, tier: Tier) -> usize {
    shared.router.chain(tier).first().map_or(8_192, |model| {
        let window = shared
            .router
            .windows()
            .offline(model.provider(), model.model())
            .tokens;
        usize::try_from(window).unwrap_or(usize::MAX)
    })
}

/// The context window of `model`: config, else what its server says,
/// else the built-in table.
pub(crate) async fn window_of(shared: &Shared, model: &ModelRef) -> usize {
    let windows = shared.router.windows();
    let window = match shared.router.client(model.provider()) {
        Some(client) => windows.resolve(client.as_ref(), model.model()).await,
        None => windows.offline(model.provider(), model.model()),
    };
    usize::try_from(window.tokens).unwrap_or(usize::MAX)
}

/// The event that tells the user what was compacted.
pub(crate) fn event(report: &CompactionReport) -> AgentEvent {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    AgentEvent::Compaction {
        replaced: count(report.replaced),
        tokens_before: count(report.tokens_before),
        tokens_after: count(report.tokens_after),
        fallback: report.fallback,
    }
}

/// Compacts a session now (`/compact`), for the model the session's next
/// turn would use, whatever its size. `None` when there is nothing older
/// than the kept turns.
pub(crate) async fn force(
    shared: &Shared,
    session: &SessionKey,
    model: &ModelRef,
    system_tokens: usize,
    extract: bool,
    cancel: &CancellationToken,
) -> Result<Option<CompactionReport>> {
    let compactor = compactor(shared, session, 0, model, cancel, extract);
    let window = window_of(shared, model).await;
    compactor
        .compact(
            shared.store.as_ref(),
            session,
            Budget {
                window,
                overhead: system_tokens,
            },
            true,
            cancel,
        )
        .await
        .map_err(|error| match error {
            CompactionError::Cancelled => Error::Cancelled,
            CompactionError::Store(error) => error.into(),
        })
}

/// One line saying what was compacted.
pub(crate) fn describe(report: &CompactionReport) -> String {
    let how = match &report.fallback_reason {
        Some(reason) if report.fallback => format!("an extractive summary ({reason})"),
        _ if report.fallback => "an extractive summary".to_owned(),
        _ => "a summary".to_owned(),
    };
    format!(
        "Compacted {} older messages into {how}: about {} tokens before, {} after; the most recent turns are kept word for word.",
        report.replaced, report.tokens_before, report.tokens_after
    )
}
