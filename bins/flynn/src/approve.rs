//! How `flynn send` answers a tool call that needs confirmation: `--yes`
//! approves, a terminal is asked (yes, no, or always for this tool for the
//! rest of the run), and without either the call is denied.

use std::io::{BufRead, BufReader, IsTerminal, Write};

use async_trait::async_trait;
use flynn_core::{ApprovalRequest, ApproveAll, Approver, Decision, DenyAll};

/// Whether a person can be asked on a terminal.
pub fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok()
}

/// The approver for this run.
pub fn for_run(yes: bool) -> std::sync::Arc<dyn Approver> {
    if yes {
        return std::sync::Arc::new(ApproveAll);
    }
    if interactive() {
        return std::sync::Arc::new(Terminal {
            asking: tokio::sync::Mutex::new(()),
            always: std::sync::Mutex::new(std::collections::BTreeSet::new()),
        });
    }
    std::sync::Arc::new(DenyAll::new(
        "it needs confirmation and there is no terminal to ask (run `flynn send --yes` to approve such calls)",
    ))
}

/// Asks on the controlling terminal, one question at a time.
struct Terminal {
    asking: tokio::sync::Mutex<()>,
    /// Tools the user approved for the rest of this run ("always").
    always: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Terminal {
    fn approved_always(&self, tool: &str) -> bool {
        self.always.lock().is_ok_and(|always| always.contains(tool))
    }
}

/// A person's answer at the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Yes,
    No,
    Always,
}

#[async_trait]
impl Approver for Terminal {
    async fn approve(&self, request: &ApprovalRequest) -> Decision {
        let _one_at_a_time = self.asking.lock().await;
        if self.approved_always(&request.tool) {
            return Decision::Approve;
        }
        let mut input = request.input.to_string();
        if input.len() > 200 {
            let end = input.floor_char_boundary(197);
            input.truncate(end);
            input.push_str("...");
        }
        let why = request
            .reason
            .as_ref()
            .map(|reason| format!("; asked because {reason}"))
            .unwrap_or_default();
        let question = format!(
            "Allow {} {input}? ({}{why}; no answer in {} s denies) [y/N/a=always] ",
            request.tool,
            request.effect.as_str().replace('_', " "),
            request.timeout.as_secs()
        );
        // Let the progress line of this call reach stderr before the question.
        tokio::task::yield_now().await;
        let answer = tokio::task::spawn_blocking(move || ask(&question)).await;
        match answer {
            Ok(Ok(Answer::Yes)) => Decision::Approve,
            Ok(Ok(Answer::Always)) => {
                if let Ok(mut always) = self.always.lock() {
                    always.insert(request.tool.clone());
                }
                Decision::Approve
            }
            Ok(Ok(Answer::No)) => Decision::Deny {
                reason: "the user said no".to_owned(),
            },
            Ok(Err(error)) => Decision::Deny {
                reason: format!("cannot ask on the terminal: {error}"),
            },
            Err(error) => Decision::Deny {
                reason: format!("cannot ask on the terminal: {error}"),
            },
        }
    }
}

fn ask(question: &str) -> std::io::Result<Answer> {
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")?;
    tty.write_all(question.as_bytes())?;
    tty.flush()?;
    let mut line = String::new();
    BufReader::new(tty).read_line(&mut line)?;
    Ok(parse_answer(&line))
}

fn parse_answer(line: &str) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Yes,
        "a" | "always" => Answer::Always,
        _ => Answer::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_default_to_no() {
        let answers: Vec<Answer> = ["y\n", "YES", " a ", "always", "n", "", "sure"]
            .into_iter()
            .map(parse_answer)
            .collect();
        assert_eq!(
            answers,
            [
                Answer::Yes,
                Answer::Yes,
                Answer::Always,
                Answer::Always,
                Answer::No,
                Answer::No,
                Answer::No
            ]
        );
    }
}
