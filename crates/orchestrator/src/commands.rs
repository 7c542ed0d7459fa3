//! Chat commands: answered before (and instead of) the model, the same way
//! from every entry point (CLI, chat channels, web chat).

use flynn_protocol::config::{ModelRef, VoiceReply};
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
    /// Whether the session's answers are also spoken.
    Voice(VoiceChoice),
}

/// What `/voice` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoiceChoice {
    /// `/voice` or `/voice status`: the mode in force and where it comes
    /// from.
    Show,
    /// `/voice on|always|auto|off`: this session's own mode.
    Set(VoiceReply),
    /// `/voice default`: the session follows the config's `voice.reply`
    /// again.
    Default,
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
            Command::Voice(_) => "voice",
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
            ("voice", argument) => match parse_voice(argument) {
                Ok(choice) => Command::Voice(choice),
                Err(error) => return Some(Err(error)),
            },
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

fn parse_voice(argument: Option<&str>) -> Result<VoiceChoice, BadArgument> {
    let Some(argument) = argument else {
        return Ok(VoiceChoice::Show);
    };
    match argument.to_ascii_lowercase().as_str() {
        "status" => Ok(VoiceChoice::Show),
        "default" => Ok(VoiceChoice::Default),
        mode => mode.parse().map(VoiceChoice::Set).map_err(|_| {
            BadArgument(format!(
                "/voice: '{argument}' is not a voice reply mode (expected on, always, auto, off, default or status)"
            ))
        }),
    }
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
/trust — vouch for the web pages and other outside content read in this session, so tools stop asking because of it
/voice [on | auto | off | default] — show or set whether answers are also spoken: on for every answer, auto to answer a voice note with one, default for the config's voice.reply";

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
        assert_eq!(parse("/voice"), Some(Ok(Command::Voice(VoiceChoice::Show))));
        assert_eq!(
            parse("/voice status"),
            Some(Ok(Command::Voice(VoiceChoice::Show)))
        );
        assert_eq!(
            parse("/voice default"),
            Some(Ok(Command::Voice(VoiceChoice::Default)))
        );
        for (text, mode) in [
            ("/voice on", VoiceReply::Always),
            ("/voice always", VoiceReply::Always),
            ("/voice Auto", VoiceReply::Auto),
            ("/voice off", VoiceReply::Off),
        ] {
            assert_eq!(
                parse(text),
                Some(Ok(Command::Voice(VoiceChoice::Set(mode)))),
                "{text}"
            );
        }
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
    fn a_bad_voice_mode_says_what_was_expected() {
        assert_eq!(
            parse("/voice loud"),
            Some(Err(BadArgument(
                "/voice: 'loud' is not a voice reply mode (expected on, always, auto, off, default or status)".into()
            )))
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
