//! slack adapter (in progress).
