//! flynn-memory's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod index;
mod ranking;
mod support;
