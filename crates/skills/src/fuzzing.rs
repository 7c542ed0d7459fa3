//! Entry points for `flynn-fuzz`: a skill archive unpacked as `flynn
//! skills install` unpacks it. Not part of the API.

use std::path::Path;

/// Unpacks the `.tar.gz` at `archive` into `to` (created).
pub fn unpack(archive: &Path, to: &Path) -> crate::Result<()> {
    crate::install::unpack(archive, to)
}
