//! The daemon's recent log lines, for `system.logs` and the dashboard: a
//! `tracing` layer that keeps the last lines in memory. Binaries add
//! [`log_layer`] to their subscriber; a process without it reports that
//! nothing is captured.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Lines kept.
const CAPACITY: usize = 1000;
/// A longer line is cut here.
const MAX_LINE: usize = 2000;

static LINES: OnceLock<Mutex<VecDeque<String>>> = OnceLock::new();

/// The layer that feeds `system.logs`. Add it once, next to the layer
/// that prints (it sees what the subscriber's filter lets through).
pub fn log_layer() -> LogLayer {
    let _ = LINES.get_or_init(|| Mutex::new(VecDeque::with_capacity(CAPACITY)));
    LogLayer
}

/// See [`log_layer`].
#[derive(Debug, Clone, Copy)]
pub struct LogLayer;

impl<S: Subscriber> Layer<S> for LogLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let Some(lines) = LINES.get() else {
            return;
        };
        let meta = event.metadata();
        let mut line = format!("{} {:>5} {}:", timestamp(), meta.level(), meta.target());
        event.record(&mut Fields(&mut line));
        if line.len() > MAX_LINE {
            let cut = line.floor_char_boundary(MAX_LINE);
            line.truncate(cut);
            line.push('…');
        }
        let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == CAPACITY {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// The last `limit` lines, oldest first; `None` when no layer captures.
pub(crate) fn recent(limit: usize) -> Option<Vec<String>> {
    let lines = LINES.get()?.lock().unwrap_or_else(PoisonError::into_inner);
    let skip = lines.len().saturating_sub(limit);
    Some(lines.iter().skip(skip).cloned().collect())
}

/// UTC time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn timestamp() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}
