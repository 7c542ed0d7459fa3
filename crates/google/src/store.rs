//! The auth store: one JSON file, mode 0600, with every signed-in account.
//!
//! ```json
//! { "version": 1,
//!   "google": { "default": "me@gmail.com",
//!               "accounts": { "me@gmail.com": { "client_id": "…", "refresh_token": "…", … } },
//!               "migrated": ["/home/me/.config/flynn/gmail-token.json"] } }
//! ```
//!
//! Every change is made under an exclusive lock on `auth.json.lock`, read
//! fresh, and written to a temporary file that replaces the old one, so the
//! CLI and a running daemon (which refreshes tokens) never lose each
//! other's writes or leave half a file.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::GoogleError;

/// The file's format version.
const VERSION: u32 = 1;

/// The whole file. Sections Flynn does not know are kept as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuthFile {
    #[serde(default = "version")]
    pub version: u32,
    #[serde(default, skip_serializing_if = "GoogleAccounts::is_empty")]
    pub google: GoogleAccounts,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

fn version() -> u32 {
    VERSION
}

/// The Google accounts signed in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GoogleAccounts {
    /// The account used when none is named: the first signed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(default)]
    pub accounts: BTreeMap<String, Account>,
    /// Older token files already taken in (never read again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrated: Vec<PathBuf>,
}

impl GoogleAccounts {
    fn is_empty(&self) -> bool {
        self.default.is_none() && self.accounts.is_empty() && self.migrated.is_empty()
    }

    /// `name`, else the default account, else the only one.
    pub fn pick(&self, name: Option<&str>) -> Option<(&str, &Account)> {
        match name {
            Some(name) => self
                .accounts
                .get_key_value(name)
                .or_else(|| {
                    self.accounts
                        .iter()
                        .find(|(key, _)| key.eq_ignore_ascii_case(name))
                })
                .map(|(k, a)| (k.as_str(), a)),
            None => self
                .default
                .as_deref()
                .and_then(|d| self.accounts.get_key_value(d))
                .or_else(|| self.accounts.iter().next())
                .map(|(k, a)| (k.as_str(), a)),
        }
    }
}

/// One account's sign-in: the client it was made with (refresh tokens are
/// bound to it) and its grants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Account {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Usually one: a sign-in asks for every scope granted before too.
    /// Token files taken in from an older install add one each.
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// When the account signed in (RFC 3339), or was taken in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_in_at: Option<String>,
}

impl Account {
    /// Every scope granted, in the order granted, without duplicates.
    pub fn scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = Vec::new();
        for scope in self.grants.iter().flat_map(|g| &g.scopes) {
            if !scopes.contains(scope) {
                scopes.push(scope.clone());
            }
        }
        scopes
    }
}

/// A refresh token and what it grants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// When the access token expires, in Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The scopes granted, as Google listed them.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The older token file it was taken in from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<PathBuf>,
}

/// Where the store is by default: `$XDG_CONFIG_HOME/flynn/auth.json`, else
/// `~/.config/flynn/auth.json`.
pub fn default_auth_path(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(xdg) = env("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("flynn").join("auth.json"));
    }
    env("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".config/flynn/auth.json"))
}

/// The file, and the operations on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthStore {
    path: PathBuf,
}

impl AuthStore {
    pub fn at(path: impl Into<PathBuf>) -> Self {
        AuthStore { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory older token files are looked for in.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or_else(|| Path::new("."))
    }

    /// The file as it is now (empty when there is none).
    pub fn load(&self) -> Result<AuthFile, GoogleError> {
        let path = self.path.clone();
        read(&path)
    }

    /// Changes the file under its lock: `change` sees what is there now,
    /// and what it leaves is written (mode 0600) before the lock is let go.
    pub fn update<R>(&self, change: impl FnOnce(&mut AuthFile) -> R) -> Result<R, GoogleError> {
        let dir = self.dir().to_owned();
        fs::create_dir_all(&dir)
            .map_err(|e| store_error(format!("cannot create {}: {e}", dir.display())))?;
        let lock_path = self.path.with_extension("json.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| store_error(format!("cannot open {}: {e}", lock_path.display())))?;
        lock.lock()
            .map_err(|e| store_error(format!("cannot lock {}: {e}", lock_path.display())))?;
        let mut file = read(&self.path)?;
        let result = change(&mut file);
        self.write(&file)?;
        drop(lock);
        Ok(result)
    }

    fn write(&self, file: &AuthFile) -> Result<(), GoogleError> {
        let text = serde_json::to_vec_pretty(file)
            .map_err(|e| store_error(format!("cannot write the auth store: {e}")))?;
        let tmp = self.path.with_extension("json.tmp");
        let _ = fs::remove_file(&tmp);
        let written = (|| {
            let mut out = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)?;
            out.write_all(&text)?;
            out.write_all(b"\n")?;
            out.sync_all()?;
            fs::rename(&tmp, &self.path)?;
            // A file the owner made wider is narrowed again.
            fs::set_permissions(&self.path, fs::Permissions::from_mode(0o600))?;
            File::open(&self.path)?.sync_all()
        })();
        written.map_err(|e| store_error(format!("cannot write {}: {e}", self.path.display())))
    }
}

fn read(path: &Path) -> Result<AuthFile, GoogleError> {
    match fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(AuthFile {
            version: VERSION,
            ..AuthFile::default()
        }),
        Ok(bytes) => {
            let file: AuthFile = serde_json::from_slice(&bytes).map_err(|e| {
                store_error(format!(
                    "{} is not a Flynn auth store ({e}); fix it or move it away and sign in again",
                    path.display()
                ))
            })?;
            if file.version > VERSION {
                return Err(store_error(format!(
                    "{} is version {} of the auth store; this Flynn reads version {VERSION} (upgrade Flynn)",
                    path.display(),
                    file.version
                )));
            }
            Ok(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AuthFile {
            version: VERSION,
            ..AuthFile::default()
        }),
        Err(e) => Err(store_error(format!("cannot read {}: {e}", path.display()))),
    }
}

fn store_error(message: String) -> GoogleError {
    GoogleError::Store(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_private_keeps_unknown_sections_and_picks_accounts() {
        let dir = tempfile::tempdir().unwrap();
        let store = AuthStore::at(dir.path().join("flynn/auth.json"));
        assert_eq!(store.load().unwrap().google.accounts.len(), 0);
        fs::create_dir_all(store.dir()).unwrap();
        fs::write(store.path(), r#"{"version":1,"github":{"token":"kept"}}"#).unwrap();
        fs::set_permissions(store.path(), fs::Permissions::from_mode(0o644)).unwrap();
        store
            .update(|file| {
                for name in ["b@example.com", "a@example.com"] {
                    file.google.accounts.insert(
                        name.to_owned(),
                        Account {
                            client_id: "id".into(),
                            ..Account::default()
                        },
                    );
                }
                file.google.default = Some("b@example.com".into());
            })
            .unwrap();
        let mode = fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let file = store.load().unwrap();
        assert_eq!(file.other["github"]["token"], "kept");
        assert_eq!(file.google.pick(None).unwrap().0, "b@example.com");
        assert_eq!(
            file.google.pick(Some("A@example.com")).unwrap().0,
            "a@example.com"
        );
        assert!(file.google.pick(Some("c@example.com")).is_none());
    }

    #[test]
    fn a_damaged_store_is_named_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = AuthStore::at(dir.path().join("auth.json"));
        fs::write(store.path(), "{not json").unwrap();
        let error = store.update(|_| ()).unwrap_err().to_string();
        assert!(
            error.contains("auth.json is not a Flynn auth store"),
            "{error}"
        );
        assert_eq!(fs::read_to_string(store.path()).unwrap(), "{not json");
    }

    #[test]
    fn the_default_path_follows_xdg() {
        let env = |xdg: Option<&'static str>| {
            move |name: &str| match name {
                "XDG_CONFIG_HOME" => xdg.map(str::to_owned),
                "HOME" => Some("/home/me".to_owned()),
                _ => None,
            }
        };
        assert_eq!(
            default_auth_path(env(None)).unwrap(),
            Path::new("/home/me/.config/flynn/auth.json")
        );
        assert_eq!(
            default_auth_path(env(Some("/x"))).unwrap(),
            Path::new("/x/flynn/auth.json")
        );
    }
}
