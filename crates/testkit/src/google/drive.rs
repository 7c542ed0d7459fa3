//! The Drive API (`/drive/v3/…`, `/upload/drive/v3/files`).

use super::{Answer, Caller, Req, State, unserved};

#[derive(Debug)]
pub(crate) struct DriveFile {
    pub id: String,
}

pub(crate) fn route(_st: &mut State, _req: &Req, _caller: &Caller, _segs: &[&str]) -> Answer {
    Err(unserved())
}

pub(crate) fn upload(_st: &mut State, _req: &Req, _caller: &Caller, _segs: &[&str]) -> Answer {
    Err(unserved())
}
