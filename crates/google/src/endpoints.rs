//! Where each Google endpoint is.

/// The OAuth endpoints and each API's base. [`Endpoints::at`] puts them all
/// under one base URL at their usual paths (a local stand-in, a proxy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub auth: String,
    pub token: String,
    pub device: String,
    pub revoke: String,
    pub userinfo: String,
    /// `…/gmail/v1/users/me`.
    pub gmail: String,
    /// `…/calendar/v3`.
    pub calendar: String,
    /// `…/drive/v3`.
    pub drive: String,
    /// `…/upload/drive/v3`.
    pub drive_upload: String,
    /// `…/v1/documents`.
    pub docs: String,
    /// `…/tasks/v1`.
    pub tasks: String,
}

impl Endpoints {
    /// Google's own.
    pub fn google() -> Self {
        Endpoints {
            auth: "https://accounts.google.com/o/oauth2/v2/auth".into(),
            token: "https://oauth2.googleapis.com/token".into(),
            device: "https://oauth2.googleapis.com/device/code".into(),
            revoke: "https://oauth2.googleapis.com/revoke".into(),
            userinfo: "https://openidconnect.googleapis.com/v1/userinfo".into(),
            gmail: "https://gmail.googleapis.com/gmail/v1/users/me".into(),
            calendar: "https://www.googleapis.com/calendar/v3".into(),
            drive: "https://www.googleapis.com/drive/v3".into(),
            drive_upload: "https://www.googleapis.com/upload/drive/v3".into(),
            docs: "https://docs.googleapis.com/v1/documents".into(),
            tasks: "https://tasks.googleapis.com/tasks/v1".into(),
        }
    }

    /// Every endpoint under `base`, at Google's paths.
    pub fn at(base: &str) -> Self {
        let base = base.trim().trim_end_matches('/');
        let at = |path: &str| format!("{base}{path}");
        Endpoints {
            auth: at("/o/oauth2/v2/auth"),
            token: at("/token"),
            device: at("/device/code"),
            revoke: at("/revoke"),
            userinfo: at("/v1/userinfo"),
            gmail: at("/gmail/v1/users/me"),
            calendar: at("/calendar/v3"),
            drive: at("/drive/v3"),
            drive_upload: at("/upload/drive/v3"),
            docs: at("/v1/documents"),
            tasks: at("/tasks/v1"),
        }
    }

    /// [`at`](Self::at) `api_url`, else Google's.
    pub fn from_api_url(api_url: Option<&str>) -> Self {
        api_url.map_or_else(Self::google, Self::at)
    }
}
