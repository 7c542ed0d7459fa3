//! discord adapter (in progress).
