//! Entry points for `flynn-fuzz` (the fuzz targets and their corpus
//! replay): the crate's private parsers, reachable from outside it. Not
//! part of the API.

use crate::env::Env;

/// Parses `text` as one YAML document; on failure, the line and column
/// of the problem.
pub fn document(text: &str) -> Result<(), (u64, u64)> {
    crate::document::Document::parse(text)
        .map(drop)
        .map_err(|located| (located.line, located.column))
}

/// Expands the `${VAR}`s of `input` from `env`: the text, or the
/// reference that failed as written.
pub fn expand(input: &str, env: &dyn Env) -> Result<String, String> {
    crate::expand::expand(input, env)
        .map(|expansion| expansion.text)
        .map_err(|error| error.reference)
}

/// Renames the key at dotted `path` to `to` in the file's text, as a
/// migration step does.
pub fn rename(text: &str, path: &str, to: &str) -> crate::Result<String> {
    crate::migrate::rename(text, path, to)
}
