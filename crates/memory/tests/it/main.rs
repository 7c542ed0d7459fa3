//! flynn-memory's integration tests.
