//! Flynn's Google client, sign-in, tools and mailbox history against
//! `FakeGoogle`, the strict stand-in for Google's OAuth and APIs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod live;
mod oauth;
mod tools;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use flynn_google::oauth::Tokens;
use flynn_google::{AuthStore, ClientCredentials, Endpoints, Google};
use flynn_testkit::google::{CLIENT_ID, CLIENT_SECRET, FakeGoogle, OWNER};

/// The fake's client.
pub fn client() -> ClientCredentials {
    ClientCredentials {
        id: CLIENT_ID.to_owned(),
        secret: Some(CLIENT_SECRET.to_owned()),
    }
}

/// A Google client on the fake, its store in a scratch directory.
pub struct Setup {
    pub fake: FakeGoogle,
    pub google: Arc<Google>,
    pub dir: tempfile::TempDir,
}

impl Setup {
    /// No account signed in.
    pub fn fresh() -> Setup {
        let fake = FakeGoogle::start();
        let dir = tempfile::tempdir().unwrap();
        let google = Google::new(
            AuthStore::at(dir.path().join("flynn/auth.json")),
            Endpoints::at(&fake.base_url()),
            Some(client()),
        )
        .with_max_wait(Duration::from_secs(3));
        Setup {
            fake,
            google: Arc::new(google),
            dir,
        }
    }

    /// The owner signed in with `scopes` (short names: `gmail.modify`).
    pub fn signed_in(scopes: &[&str]) -> Setup {
        let setup = Setup::fresh();
        setup.sign_in(OWNER, scopes);
        setup
    }

    pub fn sign_in(&self, email: &str, scopes: &[&str]) {
        let issued = self.fake.issue_tokens(email, scopes);
        let full: Vec<String> = scopes
            .iter()
            .map(|s| {
                if s.contains(':') || *s == "openid" || *s == "email" {
                    (*s).to_owned()
                } else {
                    format!("https://www.googleapis.com/auth/{s}")
                }
            })
            .collect();
        self.google
            .keep_sign_in(
                email,
                &client(),
                &Tokens {
                    access_token: issued.access_token,
                    refresh_token: Some(issued.refresh_token),
                    expires_in: Some(Duration::from_secs(3599)),
                    scopes: Some(full.clone()),
                },
                &full,
            )
            .unwrap();
    }

    /// The workspace tools write into.
    pub fn workspace(&self) -> std::path::PathBuf {
        let workspace = self.dir.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        workspace
    }

    pub fn assert_strict(&self) {
        assert_eq!(self.fake.violations(), Vec::<String>::new());
    }
}

/// Every scope the tools use.
pub const ALL: [&str; 7] = [
    "openid",
    "email",
    "gmail.modify",
    "calendar",
    "drive",
    "documents",
    "tasks",
];
