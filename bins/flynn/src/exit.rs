use std::process::ExitCode;

use flynn_core::ErrorCode;

/// A failure on its way to the user: a message for stderr and an exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Usage or config error.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    pub fn other(message: impl Into<String>) -> Self {
        Failure {
            code: 1,
            message: message.into(),
        }
    }

    /// The exit code for an error code: 2 config, 3 provider, 4 refused,
    /// 130 cancelled.
    pub fn from_code(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure {
            code: exit_code(code),
            message: message.into(),
        }
    }

    pub fn report(self) -> ExitCode {
        if !self.message.is_empty() {
            eprintln!("error: {}", self.message);
        }
        ExitCode::from(self.code)
    }
}

pub fn exit_code(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::Config => 2,
        ErrorCode::Provider => 3,
        ErrorCode::Refused => 4,
        ErrorCode::Cancelled => 130,
        ErrorCode::Storage | ErrorCode::Internal => 1,
    }
}

impl From<flynn_core::config::Error> for Failure {
    fn from(error: flynn_core::config::Error) -> Self {
        Failure::usage(error.to_string())
    }
}

impl From<flynn_core::Error> for Failure {
    fn from(error: flynn_core::Error) -> Self {
        Failure::from_code(error.code(), error.to_string())
    }
}
