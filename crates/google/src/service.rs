//! Which OAuth scopes each service's tools need.

use flynn_protocol::config::GoogleService;

/// Asked for at every sign-in: they name the account (`userinfo`).
pub const IDENTITY_SCOPES: [&str; 2] = ["openid", "email"];

const AUTH: &str = "https://www.googleapis.com/auth/";

/// The scope sign-in asks for to use `service`'s tools: the narrowest one
/// that covers every tool of the family.
pub fn scope_of(service: GoogleService) -> String {
    let name = match service {
        // Read, draft, send and label; not permanent deletion.
        GoogleService::Gmail => "gmail.modify",
        GoogleService::Calendar => "calendar",
        // Search and read any of the owner's files, not only Flynn's own.
        GoogleService::Drive => "drive",
        GoogleService::Docs => "documents",
        GoogleService::Tasks => "tasks",
    };
    format!("{AUTH}{name}")
}

/// Scopes that grant all `service`'s tools need, besides [`scope_of`]
/// (broader ones an account may have been given by another app).
fn also_sufficient(service: GoogleService) -> &'static [&'static str] {
    match service {
        GoogleService::Gmail => &["https://mail.google.com/"],
        GoogleService::Docs => &["https://www.googleapis.com/auth/drive"],
        _ => &[],
    }
}

/// Every scope for `services`, identity first, without duplicates.
pub fn scopes_for(services: &[GoogleService]) -> Vec<String> {
    let mut scopes: Vec<String> = IDENTITY_SCOPES.iter().map(|s| (*s).to_owned()).collect();
    for service in services {
        let scope = scope_of(*service);
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    scopes
}

/// Whether `granted` lets `service`'s tools work.
pub fn service_granted(service: GoogleService, granted: &[String]) -> bool {
    let needed = scope_of(service);
    granted
        .iter()
        .any(|g| *g == needed || also_sufficient(service).contains(&g.as_str()))
}

/// A scope as a person reads it (`gmail.modify` for the full URL).
pub fn scope_label(scope: &str) -> &str {
    scope.strip_prefix(AUTH).unwrap_or(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_asked_per_service_and_broader_grants_count() {
        let scopes = scopes_for(&[GoogleService::Gmail, GoogleService::Calendar]);
        assert_eq!(
            scopes,
            [
                "openid",
                "email",
                "https://www.googleapis.com/auth/gmail.modify",
                "https://www.googleapis.com/auth/calendar"
            ]
        );
        let granted = vec!["https://mail.google.com/".to_owned()];
        assert!(service_granted(GoogleService::Gmail, &granted));
        assert!(!service_granted(GoogleService::Calendar, &granted));
        assert_eq!(scope_label(&scope_of(GoogleService::Docs)), "documents");
    }
}
