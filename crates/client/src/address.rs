//! Where the gateway is: the `/rpc` WebSocket URL (or the `/mcp` URL) from
//! an address a person typed, and the token to show it.

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

/// `http://h:p`, `h:p`, `ws://h:p/rpc`... → `http://h:p/mcp` (`https`,
/// `wss` → `https`): the gateway's MCP endpoint.
pub fn mcp_url(given: &str) -> Result<String, String> {
    let rpc = rpc_url(given)?;
    let (scheme, rest) = match rpc.split_once("://") {
        Some(("wss", rest)) => ("https", rest),
        Some((_, rest)) => ("http", rest),
        None => ("http", rpc.as_str()),
    };
    let rest = rest.strip_suffix("/rpc").unwrap_or(rest);
    let rest = rest.strip_suffix("/mcp").unwrap_or(rest);
    Ok(format!("{scheme}://{rest}/mcp"))
}

/// The token to present: `environment` (`FLYNN_GATEWAY_TOKEN`) when set,
/// else the token file in `home` (a local daemon's own,
/// [`flynn_api::TOKEN_FILE`]).
pub fn client_token(environment: Option<&str>, home: &Path) -> Option<String> {
    match environment.map(str::trim) {
        Some(token) if !token.is_empty() => Some(token.to_owned()),
        _ => std::fs::read_to_string(home.join(flynn_api::TOKEN_FILE))
            .ok()
            .map(|text| text.trim().to_owned())
            .filter(|token| !token.is_empty()),
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

    #[test]
    fn addresses_become_mcp_urls() {
        for (given, url) in [
            ("http://127.0.0.1:18800", "http://127.0.0.1:18800/mcp"),
            ("127.0.0.1:18800/", "http://127.0.0.1:18800/mcp"),
            ("ws://127.0.0.1:18800/rpc", "http://127.0.0.1:18800/mcp"),
            ("https://flynn.example/mcp", "https://flynn.example/mcp"),
        ] {
            assert_eq!(mcp_url(given).as_deref(), Ok(url), "{given}");
        }
        assert!(mcp_url("ftp://x").is_err_and(|e| e.contains("scheme 'ftp'")));
    }
}
