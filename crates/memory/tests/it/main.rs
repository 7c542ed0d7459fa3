//! flynn-memory's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backends;
mod embedders;
mod index;
mod local;
mod ranking;
mod support;
