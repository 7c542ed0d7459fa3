//! The Tasks API (`/tasks/v1/…`).

use super::{Answer, Caller, Req, State, unserved};

#[derive(Debug)]
pub(crate) struct TaskList {
    pub id: String,
    pub title: String,
}

impl TaskList {
    pub fn new(id: String, title: &str) -> Self {
        TaskList {
            id,
            title: title.to_owned(),
        }
    }
}

pub(crate) fn route(_st: &mut State, _req: &Req, _caller: &Caller, _segs: &[&str]) -> Answer {
    Err(unserved())
}
