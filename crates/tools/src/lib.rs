//! Tools for Flynn: the Tool trait, registry, executor and built-ins.
