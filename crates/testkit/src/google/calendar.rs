//! The Calendar API (`/calendar/v3/…`).

use super::{Answer, Caller, Req, State, unserved};

#[derive(Debug)]
pub(crate) struct Calendar {
    pub id: String,
}

impl Calendar {
    pub fn primary(email: &str) -> Self {
        Calendar {
            id: email.to_owned(),
        }
    }
}

pub(crate) fn route(_st: &mut State, _req: &Req, _caller: &Caller, _segs: &[&str]) -> Answer {
    Err(unserved())
}
