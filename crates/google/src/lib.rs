//! The owner's Google accounts.
//!
//! - [`AuthStore`]: the tokens, in one file (`~/.config/flynn/auth.json`,
//!   mode 0600) holding several accounts; older `*-token.json` files are
//!   taken in once ([`Google::migrate_legacy`]).
//! - [`oauth`]: signing in (the installed-app flow with PKCE and a loopback
//!   redirect, or a pasted redirect address; the device flow), refresh and
//!   revocation, on the `oauth2` crate over Flynn's reqwest client.
//! - [`Google`]: an account's API calls: a fresh token (refreshed before it
//!   expires), Google's error shape read into [`GoogleError`] (a missing
//!   scope names the command that grants it), `Retry-After` honoured.
//! - [`tools`]: `gmail.*`, `calendar.*`, `drive.*`, `docs.*` and
//!   `tasks.*`. What they read is untrusted content; what sends, creates,
//!   changes or deletes is [`ToolEffect::ActsOnAccount`], which asks first.
//! - [`watch`]: new mail from the mailbox's history (for the Gmail watcher).
//!
//! The APIs are called by hand over reqwest with slim serde types: the
//! generated Google API crates are very large for the few methods used.
//!
//! [`ToolEffect::ActsOnAccount`]: flynn_protocol::ToolEffect::ActsOnAccount

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod client;
mod endpoints;
mod error;
pub mod oauth;
mod service;
mod store;
pub mod tools;
pub mod watch;

pub use client::{ClientCredentials, Google};
pub use endpoints::Endpoints;
pub use error::GoogleError;
pub use service::{IDENTITY_SCOPES, scope_label, scopes_for, service_granted};
pub use store::{Account, AuthFile, AuthStore, GoogleAccounts, Grant, default_auth_path};
