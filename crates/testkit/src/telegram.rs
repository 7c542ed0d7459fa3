//! Fake telegram API (in progress).
