//! Whether a provider runs on a machine the user controls, which decides
//! the providers the `local` tier may use (`models.local_only`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use flynn_protocol::config::ProviderConfig;
use reqwest::Url;

/// The explicit `local` setting when there is one; otherwise a guess from
/// the base URL (the kind's default URL when none is configured): local
/// when the host is a loopback, private (RFC 1918, IPv6 ULA), link-local
/// or unspecified address, `localhost`, `*.localhost` or `*.local`.
/// A provider with no URL to judge (Bedrock) is remote.
pub(crate) fn is_local(config: &ProviderConfig) -> bool {
    if let Some(local) = config.local {
        return local;
    }
    config
        .base_url
        .as_deref()
        .or(config.kind.default_base_url())
        .is_some_and(url_is_local)
}

/// Whether `url`'s host is on this machine or its private network.
pub(crate) fn url_is_local(url: &str) -> bool {
    let Ok(url) = Url::parse(url.trim()) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    // IPv6 hosts come in brackets: `[::1]`.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip_is_local(ip),
        Err(_) => domain_is_local(host),
    }
}

fn domain_is_local(domain: &str) -> bool {
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    domain == "localhost" || domain.ends_with(".localhost") || domain.ends_with(".local")
}

fn ip_is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => ipv4_is_local(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => ipv4_is_local(v4),
            None => ipv6_is_local(ip),
        },
    }
}

fn ipv4_is_local(ip: Ipv4Addr) -> bool {
    ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
}

fn ipv6_is_local(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        // fc00::/7, unique local addresses.
        || (first & 0xfe00) == 0xfc00
        // fe80::/10, link-local unicast.
        || (first & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use flynn_protocol::config::ProviderKind;

    use super::*;

    #[test]
    fn hosts_on_this_machine_or_its_network_are_local() {
        let local = [
            "http://127.0.0.1:11434/v1",
            "http://127.8.9.10/v1",
            "http://[::1]:8080/v1",
            "http://0.0.0.0:8000/v1",
            "http://10.1.2.3/v1",
            "http://172.16.0.5/v1",
            "http://172.31.255.255/v1",
            "http://192.168.1.20:1234/v1",
            "http://169.254.10.10/v1",
            "http://[fd12:3456::1]/v1",
            "http://[fe80::1]/v1",
            "http://[::ffff:192.168.0.2]/v1",
            "http://localhost:11434/v1",
            "http://LOCALHOST./v1",
            "http://ollama.localhost/v1",
            "http://gpu-box.local:8000/v1",
        ];
        let remote = [
            "https://api.anthropic.com",
            "https://api.openai.com/v1",
            "http://8.8.8.8/v1",
            "http://172.32.0.1/v1",
            "http://100.64.0.1/v1",
            "http://[2001:db8::1]/v1",
            "http://localhost.example.com/v1",
            "http://mylocal/v1",
            "not a url",
            "",
        ];
        let judged = |urls: &[&str]| -> Vec<(String, bool)> {
            urls.iter()
                .map(|url| ((*url).to_owned(), url_is_local(url)))
                .collect()
        };
        assert_eq!(
            judged(&local),
            local.map(|url| (url.to_owned(), true)).to_vec()
        );
        assert_eq!(
            judged(&remote),
            remote.map(|url| (url.to_owned(), false)).to_vec()
        );
    }

    #[test]
    fn the_setting_wins_then_the_url_then_the_kinds_default() {
        let with = |kind, base: Option<&str>, local: Option<bool>| {
            let mut config = ProviderConfig::new(kind);
            config.base_url = base.map(str::to_owned);
            config.local = local;
            is_local(&config)
        };
        assert_eq!(
            [
                // Self-hosted kinds default to a loopback URL.
                with(ProviderKind::Ollama, None, None),
                with(ProviderKind::Llamacpp, None, None),
                with(ProviderKind::Vllm, None, None),
                with(ProviderKind::Lmstudio, None, None),
                // ...but a remote base URL is remote.
                with(
                    ProviderKind::Ollama,
                    Some("https://ollama.example.com/v1"),
                    None
                ),
                // Hosted kinds are remote, unless pointed at this machine.
                with(ProviderKind::Anthropic, None, None),
                with(ProviderKind::Openai, Some("http://127.0.0.1:9/v1"), None),
                with(ProviderKind::OpenaiCompatible, None, None),
                with(ProviderKind::Bedrock, None, None),
                // The explicit setting always wins.
                with(
                    ProviderKind::OpenaiCompatible,
                    Some("https://gpu.example.com/v1"),
                    Some(true)
                ),
                with(ProviderKind::Ollama, None, Some(false)),
            ],
            [
                true, true, true, true, false, false, true, false, false, true, false
            ]
        );
    }
}
