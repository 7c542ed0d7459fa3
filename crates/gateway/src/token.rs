//! Where the gateway's bearer token comes from: `gateway.token`, else
//! `FLYNN_GATEWAY_TOKEN`, else `FLYNN_HOME/gateway.token`, generated
//! (mode 0600) the first time.

use std::io::Write;
use std::path::{Path, PathBuf};

pub use flynn_api::TOKEN_FILE;

/// The name of the admin token (`gateway.token`, `FLYNN_GATEWAY_TOKEN` or
/// the token file), in logs and the audit log.
pub const ADMIN_TOKEN_NAME: &str = "default";

/// Shortest token accepted from the config or the environment.
pub const MIN_TOKEN_LEN: usize = 32;

/// One entry of `gateway.tokens` with its secret read.
#[derive(Clone, PartialEq, Eq)]
pub struct NamedToken {
    pub name: String,
    pub token: String,
    pub scopes: Vec<flynn_protocol::config::TokenScope>,
}

impl std::fmt::Debug for NamedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedToken")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// The tokens of `gateway.tokens`, their files read. The error names the
/// entry and says what is wrong.
pub fn resolve_named(
    settings: &flynn_protocol::config::GatewayConfig,
) -> Result<Vec<NamedToken>, String> {
    let mut tokens = Vec::new();
    for (index, entry) in settings.tokens.iter().enumerate() {
        let at = format!("gateway.tokens[{index}] ({})", entry.name);
        let token = match (&entry.token, &entry.token_file) {
            (Some(token), None) => token.trim().to_owned(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| format!("{at}.token_file: cannot read {}: {e}", path.display()))?
                .trim()
                .to_owned(),
            _ => {
                return Err(format!(
                    "{at}: expected `token` or `token_file`, one of them"
                ));
            }
        };
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "{at}: the token is {} characters; expected at least {MIN_TOKEN_LEN} (`flynn token create` makes one)",
                token.len()
            ));
        }
        tokens.push(NamedToken {
            name: entry.name.clone(),
            token,
            scopes: entry.scopes.clone(),
        });
    }
    Ok(tokens)
}

/// Where the token in use came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `gateway.token` in the config file.
    Config,
    /// The `FLYNN_GATEWAY_TOKEN` environment variable.
    Environment,
    /// The token file, as found.
    File(PathBuf),
    /// The token file, just created.
    Generated(PathBuf),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Config => f.write_str("gateway.token in the config"),
            TokenSource::Environment => f.write_str("FLYNN_GATEWAY_TOKEN"),
            TokenSource::File(path) => write!(f, "{}", path.display()),
            TokenSource::Generated(path) => write!(f, "{} (new)", path.display()),
        }
    }
}

/// Picks the token: the config's, the environment's, or the file's,
/// creating the file with a new random token when there is none.
pub fn resolve_token(
    configured: Option<&str>,
    environment: Option<&str>,
    home: &Path,
) -> std::io::Result<(String, TokenSource)> {
    if let Some(token) = configured.filter(|t| !t.trim().is_empty()) {
        return Ok((token.trim().to_owned(), TokenSource::Config));
    }
    if let Some(token) = environment.filter(|t| !t.trim().is_empty()) {
        return Ok((token.trim().to_owned(), TokenSource::Environment));
    }
    let path = home.join(TOKEN_FILE);
    if let Some(token) = read_token_file(home)? {
        restrict(&path)?;
        return Ok((token, TokenSource::File(path)));
    }
    let token = generate_token()?;
    std::fs::create_dir_all(home)?;
    let temp = home.join(format!(".{TOKEN_FILE}.{}", std::process::id()));
    {
        let mut file = create_private(&temp)?;
        file.write_all(token.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
    }
    std::fs::rename(&temp, &path)?;
    Ok((token, TokenSource::Generated(path)))
}

/// The token in `home`'s token file, if there is one (what the CLI and
/// the TUI use to reach a local daemon).
pub fn read_token_file(home: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(home.join(TOKEN_FILE)) {
        Ok(text) => {
            let token = text.trim();
            Ok((!token.is_empty()).then(|| token.to_owned()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// 32 random bytes, hex.
pub fn generate_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(hex::encode(bytes))
}

#[cfg(unix)]
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

/// A token file others can read is made private.
#[cfg(unix)]
fn restrict(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "the gateway token file was readable by others; made it 0600");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn restrict(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_then_environment_then_file() -> std::io::Result<()> {
        let home = tempfile::tempdir()?;
        let (token, source) = resolve_token(Some("from-config"), Some("from-env"), home.path())?;
        assert_eq!(
            (token.as_str(), source),
            ("from-config", TokenSource::Config)
        );
        let (token, source) = resolve_token(Some("  "), Some("from-env"), home.path())?;
        assert_eq!(
            (token.as_str(), source),
            ("from-env", TokenSource::Environment)
        );
        assert!(!home.path().join(TOKEN_FILE).exists());

        let (generated, source) = resolve_token(None, None, home.path())?;
        let path = home.path().join(TOKEN_FILE);
        assert_eq!(source, TokenSource::Generated(path.clone()));
        assert_eq!(generated.len(), 64);
        let (again, source) = resolve_token(None, None, home.path())?;
        assert_eq!(again, generated, "the file's token is reused");
        assert_eq!(source, TokenSource::File(path.clone()));
        assert_eq!(read_token_file(home.path())?, Some(generated));
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn the_token_file_is_private() -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir()?;
        resolve_token(None, None, home.path())?;
        let path = home.path().join(TOKEN_FILE);
        let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
        resolve_token(None, None, home.path())?;
        let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a readable token file is made private again");
        Ok(())
    }
}
