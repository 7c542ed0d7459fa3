//! telegram adapter (in progress).
