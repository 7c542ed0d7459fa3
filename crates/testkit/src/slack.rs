//! Fake slack API (in progress).
