//! What a panic said, and fault injection for the tests that prove a
//! panic never takes the daemon down.
//!
//! [`point`] marks a place where a test may make Flynn panic on purpose:
//! a turn, a channel adapter's connection, a webhook, the automation
//! loop. It does nothing unless the crate is built with the
//! `fault-injection` feature, and then only for the points named in
//! `FLYNN_FAULTS` (`name` panics every time, `name:N` the first N times),
//! so the shipped binaries carry no trace of it.

use std::any::Any;

/// The message a panic carried (`panic!("...")` gives a `&str` or a
/// `String`; anything else is described as such).
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&'static str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "a panic without a message"
    }
}

/// The environment variable naming the points that panic, comma-separated:
/// `turn`, `adapter.connect:1`, `webhook`, `automation`, `answer.send`, `answer.mark`.
pub const FAULTS_VAR: &str = "FLYNN_FAULTS";

/// Panics when fault injection is built in and `name` is listed in
/// [`FAULTS_VAR`] with panics left; otherwise does nothing.
#[inline]
pub fn point(name: &str) {
    #[cfg(feature = "fault-injection")]
    injected::point(name);
    #[cfg(not(feature = "fault-injection"))]
    let _ = name;
}

#[cfg(feature = "fault-injection")]
mod injected {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};

    /// Panics left per point; `None` means every time.
    fn faults() -> &'static Mutex<HashMap<String, Option<u64>>> {
        static FAULTS: OnceLock<Mutex<HashMap<String, Option<u64>>>> = OnceLock::new();
        FAULTS.get_or_init(|| {
            let spec = std::env::var(super::FAULTS_VAR).unwrap_or_default();
            let faults = spec
                .split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(|entry| match entry.split_once(':') {
                    Some((name, times)) => (name.to_owned(), times.parse().ok()),
                    None => (entry.to_owned(), None),
                })
                .collect();
            Mutex::new(faults)
        })
    }

    pub(super) fn point(name: &str) {
        let fire = {
            let mut faults = faults().lock().unwrap_or_else(PoisonError::into_inner);
            match faults.get_mut(name) {
                Some(None) => true,
                Some(Some(0)) | None => false,
                Some(Some(left)) => {
                    *left -= 1;
                    true
                }
            }
        };
        if fire {
            panic!("injected fault at {name} ({})", super::FAULTS_VAR);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_read_from_either_string_type() {
        let caught = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "plain");
        let n = 4;
        let caught = std::panic::catch_unwind(|| panic!("formatted {n}")).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "formatted 4");
        let caught = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "a panic without a message");
    }
}
