//! Recently fetched pages, so a tool loop does not fetch one page twice.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Format;

/// Pages kept at most; the oldest go first when it is full.
const CAPACITY: usize = 64;

/// Tool outputs keyed by (URL, format), each kept for `ttl`.
#[derive(Debug)]
pub(crate) struct Cache {
    ttl: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<(String, Format), Entry>,
    /// Counts insertions, to find the oldest entry.
    next: u64,
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    order: u64,
    output: String,
}

impl Cache {
    /// A `ttl` of zero turns caching off.
    pub(crate) fn new(ttl: Duration) -> Self {
        Cache {
            ttl,
            state: Mutex::default(),
        }
    }

    pub(crate) fn get(&self, url: &str, format: Format) -> Option<String> {
        if self.ttl.is_zero() {
            return None;
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .entries
            .get(&(url.to_owned(), format))
            .filter(|entry| entry.at.elapsed() < self.ttl)
            .map(|entry| entry.output.clone())
    }

    pub(crate) fn put(&self, url: &str, format: Format, output: &str) {
        if self.ttl.is_zero() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let ttl = self.ttl;
        state.entries.retain(|_, entry| entry.at.elapsed() < ttl);
        if state.entries.len() >= CAPACITY
            && let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.order)
                .map(|(key, _)| key.clone())
        {
            state.entries.remove(&oldest);
        }
        let order = state.next;
        state.next += 1;
        state.entries.insert(
            (url.to_owned(), format),
            Entry {
                at: Instant::now(),
                order,
                output: output.to_owned(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_a_zero_ttl_caches_nothing() {
        let cache = Cache::new(Duration::from_secs(60));
        cache.put("http://a/", Format::Markdown, "page");
        assert_eq!(
            cache.get("http://a/", Format::Markdown),
            Some("page".into())
        );
        assert_eq!(cache.get("http://a/", Format::Text), None);

        let off = Cache::new(Duration::ZERO);
        off.put("http://a/", Format::Markdown, "page");
        assert_eq!(off.get("http://a/", Format::Markdown), None);
    }

    #[test]
    fn a_full_cache_drops_its_oldest_page() {
        let cache = Cache::new(Duration::from_secs(60));
        for i in 0..=CAPACITY {
            cache.put(&format!("http://a/{i}"), Format::Markdown, "page");
        }
        assert_eq!(cache.get("http://a/0", Format::Markdown), None);
        assert_eq!(
            cache.get(&format!("http://a/{CAPACITY}"), Format::Markdown),
            Some("page".into())
        );
    }
}
