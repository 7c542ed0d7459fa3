//! `google`: the owner's Google accounts (Gmail, Calendar, Drive, Docs,
//! Tasks), signed in with `flynn auth google login`.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Google's tools, and the OAuth client they sign in with. Absent: no
/// Google tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoogleConfig {
    /// The OAuth client's id, from the owner's own Google Cloud project
    /// (a "Desktop app" client; see docs/google.md). Else
    /// `GOOGLE_CLIENT_ID`, else the client the account signed in with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The client's secret (Google gives installed apps one; it is not
    /// kept secret from the owner). Else `GOOGLE_CLIENT_SECRET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The services whose tools are offered and whose scopes sign-in asks
    /// for: `gmail`, `calendar`, `drive`, `docs`, `tasks` (all by default).
    #[serde(default = "all_services")]
    pub services: Vec<GoogleService>,
    /// The account the tools use when a call names none (an email
    /// address); the store's default (the first signed in) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Where tokens are kept; `~/.config/flynn/auth.json` by default
    /// (`$XDG_CONFIG_HOME/flynn/auth.json` when that is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_file: Option<PathBuf>,
    /// One base URL for every Google endpoint (OAuth and the APIs, at
    /// their usual paths): for a local stand-in or a proxy. Google's own
    /// hosts when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
}

impl Default for GoogleConfig {
    fn default() -> Self {
        GoogleConfig {
            client_id: None,
            client_secret: None,
            services: all_services(),
            account: None,
            auth_file: None,
            api_url: None,
        }
    }
}

fn all_services() -> Vec<GoogleService> {
    GoogleService::ALL.to_vec()
}

/// A Google service Flynn has tools for; its name is also the tools'
/// family (`gmail.search`, `calendar.list`…).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GoogleService {
    Gmail,
    Calendar,
    Drive,
    Docs,
    Tasks,
}

impl GoogleService {
    pub const ALL: [GoogleService; 5] = [
        GoogleService::Gmail,
        GoogleService::Calendar,
        GoogleService::Drive,
        GoogleService::Docs,
        GoogleService::Tasks,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GoogleService::Gmail => "gmail",
            GoogleService::Calendar => "calendar",
            GoogleService::Drive => "drive",
            GoogleService::Docs => "docs",
            GoogleService::Tasks => "tasks",
        }
    }
}

impl std::fmt::Display for GoogleService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for GoogleService {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoogleService::ALL
            .into_iter()
            .find(|service| service.as_str() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!("'{s}' is not a Google service: gmail, calendar, drive, docs or tasks")
            })
    }
}
