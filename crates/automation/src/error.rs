//! Why a schedule, a job or a heartbeat task was refused.

/// The accepted shape of a cron expression, shown in every error about one.
pub const CRON_SHAPE: &str = "5 fields `minute hour day-of-month month day-of-week` (`30 7 * * MON-FRI`) or 6 with seconds first (`0 30 7 * * *`)";

/// Why a schedule could not be made or a job not added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("invalid cron expression '{expr}': {reason}; expected {CRON_SHAPE}")]
    InvalidExpression {
        /// The expression as given.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not an IANA name this build knows.
    #[error(
        "unknown time zone '{name}', expected an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`"
    )]
    UnknownTimeZone {
        /// The name as given.
        name: String,
    },
    /// A job of that name is already scheduled.
    #[error("a job named '{name}' already exists: remove it first or choose another name")]
    DuplicateJob {
        /// The name in use.
        name: String,
    },
}

/// Crate-wide result.
pub type Result<T, E = ScheduleError> = std::result::Result<T, E>;
