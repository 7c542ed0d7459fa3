//! The SSRF guard: `web.fetch` reaches only public addresses unless
//! `tools.web_fetch.allow_private` names the host, address or range.
//!
//! Addresses are checked after DNS resolution (a [`Resolve`] that resolves
//! with tokio and drops blocked addresses), for IP-literal URLs (which
//! reqwest never resolves), and on every redirect (a redirect policy).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// What `tools.web_fetch.allow_private` lets through.
#[derive(Debug, Clone, Default)]
pub(crate) struct Guard {
    hosts: Vec<String>,
    nets: Vec<IpNet>,
}

impl Guard {
    /// Each entry is a CIDR range, an IP address or a host name.
    pub(crate) fn new(allow_private: &[String]) -> Self {
        let mut guard = Guard::default();
        for entry in allow_private {
            let entry = entry.trim();
            if let Ok(net) = entry.parse::<IpNet>() {
                guard.nets.push(net.trunc());
            } else if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
                guard.nets.push(IpNet::from(ip));
            } else {
                guard.hosts.push(normalise_host(entry));
            }
        }
        guard
    }

    /// Whether `host` (a name, not an address) is allowed whatever it
    /// resolves to.
    fn host_allowed(&self, host: &str) -> bool {
        let host = normalise_host(host);
        self.hosts.contains(&host)
    }

    fn ip_allowed(&self, ip: IpAddr) -> bool {
        let mapped = canonical(ip);
        self.nets
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&mapped))
    }

    /// Refuses `ip`, reached as `host`, when it is not public and nothing
    /// allows it.
    pub(crate) fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        match blocked_kind(ip) {
            Some(kind) if !self.host_allowed(host) && !self.ip_allowed(ip) => Err(Refused {
                host: host.to_owned(),
                addr: ip,
                kind,
            }),
            _ => Ok(()),
        }
    }

    /// Checks a URL before it is requested or followed: its address when
    /// the host is an IP literal (names are checked when they resolve).
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => self.check_ip(host, ip),
            Err(_) => Ok(()),
        }
    }
}

fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Why an address is not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Loopback,
    Private,
    LinkLocal,
    Unspecified,
    SharedCgnat,
    UniqueLocal,
    Multicast,
    Reserved,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Loopback => "a loopback address",
            Kind::Private => "a private address",
            Kind::LinkLocal => "a link-local address",
            Kind::Unspecified => "an unspecified address",
            Kind::SharedCgnat => "a carrier-grade NAT (shared) address",
            Kind::UniqueLocal => "a unique-local address",
            Kind::Multicast => "a multicast address",
            Kind::Reserved => "a reserved address",
        }
    }
}

/// A request the guard stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) host: String,
    pub(crate) addr: IpAddr,
    pub(crate) kind: Kind,
}

impl Refused {
    /// Why the request was refused, and that adding the host to `setting`
    /// (`tools.web_fetch.allow_private`, `tools.browser.allow_private`)
    /// lets it through.
    pub(crate) fn explain(&self, setting: &str) -> String {
        let literal = self.host.trim_matches(['[', ']']).parse::<IpAddr>().ok();
        let reached = if literal == Some(self.addr) {
            format!("{} is {}", self.addr, self.kind.describe())
        } else {
            format!(
                "{} resolves to {}, {}",
                self.host,
                self.addr,
                self.kind.describe()
            )
        };
        format!(
            "refused {}: {reached}, and private networks are off limits. \
             If this host is trusted, add '{}' to {setting}",
            self.host,
            self.host.trim_matches(['[', ']'])
        )
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explain("tools.web_fetch.allow_private"))
    }
}

impl std::error::Error for Refused {}

/// The IPv4 address an IPv6 one carries (mapped, compatible, NAT64 or
/// 6to4), or the address itself.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        // ::ffff:a.b.c.d (mapped)
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        // ::a.b.c.d (compatible, deprecated); `::` and `::1` are not IPv4.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(low(hi, lo)),
        // 64:ff9b::a.b.c.d (NAT64 well-known prefix)
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        // 2002:aabb:ccdd::/48 (6to4)
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// Why `ip` is not a public address, or `None` when it is.
pub(crate) fn blocked_kind(ip: IpAddr) -> Option<Kind> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return v4_kind(v4);
            }
            let first = v6.segments()[0];
            if v6.is_unspecified() {
                Some(Kind::Unspecified)
            } else if v6.is_loopback() {
                Some(Kind::Loopback)
            } else if first & 0xffc0 == 0xfe80 {
                Some(Kind::LinkLocal)
            } else if first & 0xfe00 == 0xfc00 {
                Some(Kind::UniqueLocal)
            } else if first & 0xffc0 == 0xfec0 {
                // Site-local, deprecated but still routed inside sites.
                Some(Kind::Private)
            } else if first & 0xff00 == 0xff00 {
                Some(Kind::Multicast)
            } else if (first, v6.segments()[1]) == (0x2001, 0x0db8)
                || (first, v6.segments()[1], v6.segments()[2]) == (0x64, 0xff9b, 1)
                || first == 0x0100 && v6.segments()[1..4] == [0, 0, 0]
            {
                // Documentation, local-use NAT64, discard-only.
                Some(Kind::Reserved)
            } else {
                None
            }
        }
    }
}

fn v4_kind(v4: Ipv4Addr) -> Option<Kind> {
    let [a, b, c, _] = v4.octets();
    if a == 0 {
        Some(Kind::Unspecified)
    } else if v4.is_loopback() {
        Some(Kind::Loopback)
    } else if v4.is_private() {
        Some(Kind::Private)
    } else if v4.is_link_local() {
        Some(Kind::LinkLocal)
    } else if a == 100 && (64..128).contains(&b) {
        Some(Kind::SharedCgnat)
    } else if (224..240).contains(&a) {
        Some(Kind::Multicast)
    } else if a >= 240
        || (a, b, c) == (192, 0, 0)
        || (a, b, c) == (192, 0, 2)
        || (a, b, c) == (198, 51, 100)
        || (a, b, c) == (203, 0, 113)
        || (a == 198 && (b == 18 || b == 19))
    {
        // Future use and broadcast, IETF protocol assignments,
        // documentation, benchmarking.
        Some(Kind::Reserved)
    } else {
        None
    }
}

/// Resolves names with tokio and keeps only the addresses the guard
/// allows; a name left with none is refused.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    guard: Arc<Guard>,
}

impl GuardedResolver {
    pub(crate) fn new(guard: Arc<Guard>) -> Self {
        GuardedResolver { guard }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = Arc::clone(&self.guard);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut first_refusal = None;
            let mut allowed = Vec::with_capacity(resolved.len());
            for addr in resolved {
                match guard.check_ip(&host, addr.ip()) {
                    Ok(()) => allowed.push(addr),
                    Err(refused) => {
                        first_refusal.get_or_insert(refused);
                    }
                }
            }
            match first_refusal {
                Some(refused) if allowed.is_empty() => Err(refused.into()),
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ip: &str) -> Option<Kind> {
        blocked_kind(ip.parse().unwrap())
    }

    #[test]
    fn non_public_addresses_are_classified() {
        let cases = [
            ("127.0.0.1", Some(Kind::Loopback)),
            ("10.1.2.3", Some(Kind::Private)),
            ("172.16.0.1", Some(Kind::Private)),
            ("192.168.1.1", Some(Kind::Private)),
            ("169.254.169.254", Some(Kind::LinkLocal)),
            ("0.0.0.0", Some(Kind::Unspecified)),
            ("100.64.0.1", Some(Kind::SharedCgnat)),
            ("224.0.0.1", Some(Kind::Multicast)),
            ("255.255.255.255", Some(Kind::Reserved)),
            ("8.8.8.8", None),
            ("100.128.0.1", None),
            ("::1", Some(Kind::Loopback)),
            ("::", Some(Kind::Unspecified)),
            ("fe80::1", Some(Kind::LinkLocal)),
            ("fd00::1", Some(Kind::UniqueLocal)),
            ("ff02::1", Some(Kind::Multicast)),
            ("::ffff:127.0.0.1", Some(Kind::Loopback)),
            ("::ffff:169.254.169.254", Some(Kind::LinkLocal)),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::10.0.0.1", Some(Kind::Private)),
            ("2002:7f00:1::", Some(Kind::Loopback)),
            ("2606:4700:4700::1111", None),
        ];
        let got: Vec<_> = cases.iter().map(|(ip, _)| (*ip, kind(ip))).collect();
        assert_eq!(got, cases);
    }

    #[test]
    fn allow_private_takes_hosts_addresses_and_ranges() {
        let guard = Guard::new(&[
            "NAS.lan.".to_owned(),
            "127.0.0.1".to_owned(),
            "10.0.0.0/8".to_owned(),
            "[fd00::1]".to_owned(),
        ]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(guard.check_ip("nas.lan", ip("192.168.1.9")), Ok(()));
        assert_eq!(guard.check_ip("x", ip("127.0.0.1")), Ok(()));
        assert_eq!(guard.check_ip("x", ip("::ffff:127.0.0.1")), Ok(()));
        assert_eq!(guard.check_ip("x", ip("10.9.8.7")), Ok(()));
        assert_eq!(guard.check_ip("x", ip("fd00::1")), Ok(()));
        assert_eq!(
            guard.check_ip("x", ip("127.0.0.2")),
            Err(Refused {
                host: "x".into(),
                addr: ip("127.0.0.2"),
                kind: Kind::Loopback
            })
        );
    }

    #[test]
    fn refusals_say_how_to_allow_the_host() {
        let guard = Guard::new(&[]);
        let refused = guard
            .check_url(&Url::parse("http://[::ffff:a9fe:a9fe]/latest").unwrap())
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "refused [::ffff:a9fe:a9fe]: ::ffff:169.254.169.254 is a link-local address, \
             and private networks are off limits. If this host is trusted, add \
             '::ffff:a9fe:a9fe' to tools.web_fetch.allow_private"
        );
        let refused = guard.check_ip("db.internal", "10.0.0.5".parse().unwrap());
        assert_eq!(
            refused.unwrap_err().to_string(),
            "refused db.internal: db.internal resolves to 10.0.0.5, a private address, \
             and private networks are off limits. If this host is trusted, add \
             'db.internal' to tools.web_fetch.allow_private"
        );
    }
}
