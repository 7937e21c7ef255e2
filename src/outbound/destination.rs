//! Where a webhook may be sent: the URL's form, the operator's `[policy]` `webhook_hosts`, and
//! the addresses it resolves to. The addresses checked are the ones the delivery connects to
//! (the client is pinned to them), so a name that resolves to a public address when the
//! subscription is made and to an internal one later (DNS rebinding) is refused at delivery.

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;

use super::address::is_internal;
use crate::config::{Policy, host_listed};
use crate::error::{Error, Result};

/// Longest URL a subscription may have.
pub const URL_MAX_CHARS: usize = 2048;

/// A checked URL and whether the operator lists its host by name or address (which lets it be
/// internal), as opposed to allowing it through `*`.
#[derive(Debug, Clone)]
pub struct Destination {
    pub url: Url,
    pub host: String,
    pub port: u16,
    pub listed: bool,
}

/// Checks a subscription's URL against its form and the policy (not its addresses: see
/// [`resolve`]). The error names the field and the setting that decides it.
pub fn check(raw: &str, policy: &Policy) -> Result<Destination> {
    let bad = |why: &str| Error::invalid(format!("url: {why}"));
    if raw.chars().count() > URL_MAX_CHARS || raw.chars().any(|c| c.is_control()) {
        return Err(bad(&format!(
            "at most {URL_MAX_CHARS} characters, no control characters"
        )));
    }
    let url = Url::parse(raw).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("an http or https URL"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("may not hold a user name or password"));
    }
    if url.fragment().is_some() {
        return Err(bad("may not have a fragment"));
    }
    let host = url
        .host_str()
        .ok_or_else(|| bad("has no host"))?
        .to_ascii_lowercase();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| bad("has no port"))?;
    let listed = host_listed(&policy.webhook_hosts, raw);
    let wildcard = policy.webhook_hosts.iter().any(|e| e.trim() == "*");
    if !listed && !wildcard {
        return Err(bad(&format!(
            "this server does not send webhooks to {host}:{port} (policy.webhook_hosts in its \
             config file)"
        )));
    }
    if !listed && let Some(ip) = literal_ip(&host) {
        check_public(ip, &host)?;
    }
    Ok(Destination {
        url,
        host,
        port,
        listed,
    })
}

/// The IP address a URL host is, if it is one (IPv6 hosts come in brackets).
fn literal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn check_public(ip: IpAddr, host: &str) -> Result<()> {
    if is_internal(ip) {
        return Err(Error::invalid(format!(
            "url: {host} is an internal address ({ip}: loopback, private or link-local), which \
             webhooks reach only when policy.webhook_hosts lists it"
        )));
    }
    Ok(())
}

/// The addresses to connect to: the host's, every one of them public unless the policy lists
/// the host. A host that resolves to an internal address is refused whole, so no address of a
/// name that mixes both is ever used.
pub async fn resolve(d: &Destination) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = match literal_ip(&d.host) {
        Some(ip) => vec![SocketAddr::new(ip, d.port)],
        None => tokio::net::lookup_host((d.host.as_str(), d.port))
            .await
            .map_err(|e| Error::invalid(format!("url: {} does not resolve ({e})", d.host)))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(Error::invalid(format!(
            "url: {} resolves to no address",
            d.host
        )));
    }
    if !d.listed {
        for a in &addrs {
            check_public(a.ip(), &d.host)?;
        }
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str]) -> Policy {
        Policy {
            webhook_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..Policy::default()
        }
    }

    #[test]
    fn only_listed_hosts_or_public_ones_through_the_wildcard() {
        assert!(check("https://hooks.example.com/x", &policy(&[])).is_err());
        assert!(
            check(
                "https://hooks.example.com/x",
                &policy(&["hooks.example.com"])
            )
            .is_ok()
        );
        assert!(check("https://hooks.example.com/x", &policy(&["*"])).is_ok());
        assert!(check("http://10.0.0.5/x", &policy(&["*"])).is_err());
        assert!(check("http://169.254.169.254/", &policy(&["*"])).is_err());
        assert!(check("http://[::1]:8080/", &policy(&["*"])).is_err());
        assert!(check("http://127.0.0.1:9/x", &policy(&["127.0.0.1"])).is_ok());
        assert!(check("ftp://hooks.example.com/", &policy(&["*"])).is_err());
        assert!(check("https://u:p@hooks.example.com/", &policy(&["*"])).is_err());
    }

    #[tokio::test]
    async fn a_name_that_resolves_inside_is_refused_unless_listed() {
        let d = check("http://localhost:9/", &policy(&["*"])).unwrap();
        assert!(resolve(&d).await.is_err());
        let d = check("http://localhost:9/", &policy(&["localhost"])).unwrap();
        let addrs = resolve(&d).await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
