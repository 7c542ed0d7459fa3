//! Embedding facade for Flynn: builds a runtime from a config value.
