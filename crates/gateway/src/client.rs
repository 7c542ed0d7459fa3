//! What a client of the gateway (the CLI, the TUI) needs to reach it: the
//! `/rpc` WebSocket URL from an address a person typed, and the token.

use std::path::Path;

/// `http://h:p`, `ws://h:p`, `h:p` (with or without `/rpc`) →
/// `ws://h:p/rpc` (`https`/`wss` → `wss`). The error says what was wrong.
pub fn rpc_url(given: &str) -> Result<String, String> {
    let given = given.trim();
    let (scheme, rest) = match given.split_once("://") {
        Some(("http" | "ws", rest)) => ("ws", rest),
        Some(("https" | "wss", rest)) => ("wss", rest),
        Some((other, _)) => {
            return Err(format!(
                "the gateway URL '{given}' has scheme '{other}'; expected http://, https://, ws:// or wss://"
            ));
        }
        None => ("ws", given),
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        return Err("the gateway URL is empty; expected http://HOST:PORT".to_owned());
    }
    let rest = rest.strip_suffix("/rpc").unwrap_or(rest);
    Ok(format!("{scheme}://{rest}/rpc"))
}

/// The token to present: `environment` (`FLYNN_GATEWAY_TOKEN`) when set,
/// else the token file in `home` (a local daemon's own).
pub fn client_token(environment: Option<&str>, home: &Path) -> Option<String> {
    match environment.map(str::trim) {
        Some(token) if !token.is_empty() => Some(token.to_owned()),
        _ => crate::read_token_file(home).ok().flatten(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_rpc_urls() {
        for (given, url) in [
            ("http://127.0.0.1:18800", "ws://127.0.0.1:18800/rpc"),
            ("127.0.0.1:18800/", "ws://127.0.0.1:18800/rpc"),
            ("wss://flynn.example/rpc", "wss://flynn.example/rpc"),
            ("https://flynn.example", "wss://flynn.example/rpc"),
        ] {
            assert_eq!(rpc_url(given).as_deref(), Ok(url), "{given}");
        }
        assert!(rpc_url("ftp://x").is_err_and(|e| e.contains("scheme 'ftp'")));
        assert!(rpc_url("http://").is_err_and(|e| e.contains("empty")));
    }
}
