//! Where a webhook may point. Outside `--demo` and tests only `https`, no
//! credentials in the URL, and never a loopback, link-local, private or
//! otherwise internal address (unless `DOCFLOW_WEBHOOK_ALLOW_PRIVATE`), so
//! that a tenant cannot turn docflow's deliveries against the network it
//! runs in. The check runs at registration and again at every delivery,
//! by the HTTP client's own resolver ([`GuardedResolver`]): a name that
//! resolved to a public address when it was registered may not resolve to
//! `127.0.0.1` later. Redirects are never followed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::Url;

/// What the deployment lets webhook URLs reach.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    pub allow_private: bool,
    pub allow_http: bool,
}

/// The longest a webhook host's name may take to resolve.
pub const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest URL an endpoint may have.
pub const MAX_URL: usize = 2048;

/// Whether `ip` is internal: loopback, private, link-local (cloud metadata
/// at 169.254.169.254 among them), shared (CGNAT), unspecified, multicast,
/// broadcast, documentation or reserved ranges, and IPv6's counterparts
/// (an IPv4 address mapped into IPv6 is judged as the IPv4 one).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local fec0::/10
                || (first == 0x2001 && v6.segments()[1] == 0x0db8) // documentation
                || (first == 0x0064 && v6.segments()[1] == 0xff9b) // NAT64 of any v4
                || v6.segments()[..6] == [0; 6] // IPv4-compatible ::a.b.c.d
        }
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

/// Checks the URL's form: scheme, credentials, host, length.
pub fn check_form(raw: &str, policy: Policy) -> Result<Url, String> {
    if raw.len() > MAX_URL {
        return Err(format!("a webhook URL may be at most {MAX_URL} bytes long"));
    }
    let url = Url::parse(raw.trim()).map_err(|e| format!("`{raw}` is not a URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        "http" => return Err("webhook URLs must use https".into()),
        other => return Err(format!("webhook URLs must use https, not {other}")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "a webhook URL may not carry credentials; verify deliveries by their signature".into(),
        );
    }
    if url.host().is_none() {
        return Err("a webhook URL needs a host".into());
    }
    if url.fragment().is_some() {
        return Err("a webhook URL may not have a #fragment".into());
    }
    Ok(url)
}

/// [`check_form`], then every address the host resolves to must be
/// public (unless the policy allows private ones).
pub async fn check(raw: &str, policy: Policy) -> Result<Url, String> {
    let url = check_form(raw, policy)?;
    if policy.allow_private {
        return Ok(url);
    }
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs = resolve(host, port)
        .await
        .map_err(|e| format!("{host} could not be resolved: {e}"))?;
    match addrs.iter().find(|a| is_internal(a.ip())) {
        Some(a) => Err(format!(
            "{host} resolves to {}, a loopback, link-local or private address; webhooks may only reach public addresses",
            a.ip()
        )),
        None => Ok(url),
    }
}

async fn resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    // An IP literal (`[::1]` keeps its brackets in the URL's host).
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    // A name whose servers answer slowly holds no request for long.
    let addrs: Vec<SocketAddr> =
        tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((bare, port)))
            .await
            .map_err(|_| {
                std::io::Error::other(format!("no answer in {}s", RESOLVE_TIMEOUT.as_secs()))
            })??
            .collect();
    if addrs.is_empty() {
        return Err(std::io::Error::other("no addresses"));
    }
    Ok(addrs)
}

/// The delivery client's resolver: it resolves as the system does and
/// refuses a name any of whose addresses is internal.
#[derive(Debug, Default)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = resolve(&host, 0).await?;
            if let Some(a) = addrs.iter().find(|a| is_internal(a.ip())) {
                return Err(format!(
                    "{host} now resolves to {}, an internal address; not delivered",
                    a.ip()
                )
                .into());
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// An IP-literal host never reaches the resolver: the delivery checks it
/// itself.
pub fn literal_is_internal(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => is_internal(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => is_internal(IpAddr::V6(ip)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> Policy {
        Policy::default()
    }

    #[test]
    fn internal_addresses_of_both_families_are_recognised_and_public_ones_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_internal(ip.parse().expect(ip)), "{ip} is internal");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111"] {
            assert!(!is_internal(ip.parse().expect(ip)), "{ip} is public");
        }
    }

    #[test]
    fn the_form_needs_https_no_credentials_and_a_host() {
        assert!(check_form("https://hooks.example.com/docflow", strict()).is_ok());
        let e = check_form("http://hooks.example.com/", strict()).expect_err("http");
        assert!(e.contains("https"), "{e}");
        assert!(check_form(
            "http://hooks.example.com/",
            Policy {
                allow_http: true,
                ..strict()
            }
        )
        .is_ok());
        let e = check_form("https://user:pw@hooks.example.com/", strict()).expect_err("creds");
        assert!(e.contains("credentials"), "{e}");
        assert!(check_form("ftp://hooks.example.com/", strict()).is_err());
        assert!(check_form("not a url", strict()).is_err());
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL));
        assert!(check_form(&long, strict()).is_err());
    }

    #[tokio::test]
    async fn literal_and_named_internal_targets_are_refused_unless_allowed() {
        for url in [
            "https://127.0.0.1/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://10.0.0.5:8443/",
            "https://[::1]/hook",
            "https://localhost/hook",
        ] {
            let e = check(url, strict()).await.expect_err(url);
            assert!(e.contains("address") || e.contains("resolve"), "{url}: {e}");
        }
        let open = Policy {
            allow_private: true,
            allow_http: true,
        };
        assert!(check("http://127.0.0.1:9/hook", open).await.is_ok());
    }
}
