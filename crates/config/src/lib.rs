//! Loads and validates Flynn's YAML configuration.
