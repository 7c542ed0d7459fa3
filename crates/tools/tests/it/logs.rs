//! Captures every log event of the test binary. One global subscriber,
//! installed once: scoped subscribers (`set_default`) race with the
//! callsite interest cache when tests run in parallel threads, and then
//! miss events.

use std::fmt::Write as _;
use std::sync::{Mutex, Once};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// Starts capturing (idempotent).
pub fn capture() {
    INSTALL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Everything);
    });
}

/// Every event so far, as `LEVEL target: field=value...`.
pub fn lines() -> Vec<String> {
    LINES.lock().unwrap().clone()
}

struct Everything;

impl tracing::Subscriber for Everything {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                let _ = write!(self.0, " {}={value:?}", field.name());
            }
        }
        let metadata = event.metadata();
        let mut fields = Fields(format!("{} {}:", metadata.level(), metadata.target()));
        event.record(&mut fields);
        LINES.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
