//! The Docs API (`/v1/documents…`).

use super::{Answer, Caller, Req, State, unserved};

pub(crate) fn route(_st: &mut State, _req: &Req, _caller: &Caller, _segs: &[&str]) -> Answer {
    Err(unserved())
}
