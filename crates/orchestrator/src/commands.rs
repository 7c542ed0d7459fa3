//! Chat commands: answered before (and instead of) the model, the same way
//! from every entry point (CLI, chat channels, web chat).

use flynn_protocol::config::ModelRef;
use flynn_protocol::{ContentBlock, Tier};

/// A chat command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Status,
    Reset,
    Cancel,
    /// `/model` alone shows the choice; with an argument, sets it.
    Model(Option<ModelChoice>),
    /// `/agent` alone lists the agents; with a name, switches to it.
    Agent(Option<String>),
    /// Summarise older messages now.
    Compact,
    /// The owner vouches for the untrusted content in the session: tools
    /// stop asking because of it.
    Trust,
}

/// What `/model` may set: a tier, or one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    Tier(Tier),
    Model(ModelRef),
}

/// Why a command's argument was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadArgument(pub String);

impl Command {
    /// The command's name, for events (`status`, `model`...).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Help => "help",
            Command::Status => "status",
            Command::Reset => "reset",
            Command::Cancel => "cancel",
            Command::Model(_) => "model",
            Command::Agent(_) => "agent",
            Command::Compact => "compact",
            Command::Trust => "trust",
        }
    }

    /// Reads a command from a message: text only, starting with one of the
    /// command names. Anything else (`/etc/hosts is missing`) is a message
    /// for the model: `None`. A known command with a bad argument is
    /// `Some(Err(..))`.
    pub fn parse(content: &[ContentBlock]) -> Option<Result<Command, BadArgument>> {
        let [ContentBlock::Text { text }] = content else {
            return None;
        };
        let text = text.trim();
        let rest = text.strip_prefix('/')?;
        let (name, argument) = match rest.split_once(char::is_whitespace) {
            Some((name, argument)) => (name, argument.trim()),
            None => (rest, ""),
        };
        let argument = (!argument.is_empty()).then_some(argument);
        let command = match (name, argument) {
            ("help", _) => Command::Help,
            ("status", _) => Command::Status,
            ("reset", _) => Command::Reset,
            ("cancel" | "stop", _) => Command::Cancel,
            ("compact", _) => Command::Compact,
            ("trust", _) => Command::Trust,
            ("model", None) => Command::Model(None),
            ("model", Some(argument)) => match parse_model(argument) {
                Ok(choice) => Command::Model(Some(choice)),
                Err(error) => return Some(Err(error)),
            },
            ("agent", argument) => Command::Agent(argument.map(str::to_owned)),
            _ => return None,
        };
        Some(Ok(command))
    }
}

fn parse_model(argument: &str) -> Result<ModelChoice, BadArgument> {
    if let Ok(tier) = argument.parse::<Tier>() {
        return Ok(ModelChoice::Tier(tier));
    }
    argument.parse::<ModelRef>().map(ModelChoice::Model).map_err(|_| {
        BadArgument(format!(
            "/model: '{argument}' is neither a tier nor a model (expected fast, default, complex, local, or provider/model such as anthropic/claude-haiku-4-5)"
        ))
    })
}

/// What `/help` says.
pub const HELP: &str = "Commands:
/help — this list
/status — agent, tier, model, context use, tokens and cost of this session
/reset — forget this conversation
/cancel — stop the running turn
/model [tier | provider/model] — show or set the model for this session
/agent [name] — show the agents or switch to one
/compact — summarise older messages now (the last turns are kept)
/trust — vouch for the web pages and other outside content read in this session, so tools stop asking because of it";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Option<Result<Command, BadArgument>> {
        Command::parse(&[ContentBlock::text(text)])
    }

    #[test]
    fn commands_are_recognised_with_their_arguments() {
        assert_eq!(parse("/help"), Some(Ok(Command::Help)));
        assert_eq!(parse("  /status  "), Some(Ok(Command::Status)));
        assert_eq!(parse("/stop"), Some(Ok(Command::Cancel)));
        assert_eq!(
            parse("/model fast"),
            Some(Ok(Command::Model(Some(ModelChoice::Tier(Tier::Fast)))))
        );
        assert_eq!(
            parse("/model openai/gpt-4o-mini"),
            Some(Ok(Command::Model(Some(ModelChoice::Model(ModelRef::new(
                "openai",
                "gpt-4o-mini"
            ))))))
        );
        assert_eq!(parse("/model"), Some(Ok(Command::Model(None))));
        assert_eq!(
            parse("/agent coder"),
            Some(Ok(Command::Agent(Some("coder".into()))))
        );
        assert_eq!(parse("/compact"), Some(Ok(Command::Compact)));
    }

    #[test]
    fn other_text_is_a_message_for_the_model() {
        assert_eq!(parse("/etc/hosts is missing"), None);
        assert_eq!(parse("what does /status do?"), None);
        assert_eq!(parse("/unknown"), None);
        assert_eq!(
            Command::parse(&[ContentBlock::text("/help"), ContentBlock::text("more")]),
            None
        );
    }

    #[test]
    fn a_bad_model_says_what_was_expected() {
        assert_eq!(
            parse("/model fastest"),
            Some(Err(BadArgument(
                "/model: 'fastest' is neither a tier nor a model (expected fast, default, complex, local, or provider/model such as anthropic/claude-haiku-4-5)".into()
            )))
        );
    }
}
