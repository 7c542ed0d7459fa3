//! Fake discord API (in progress).
