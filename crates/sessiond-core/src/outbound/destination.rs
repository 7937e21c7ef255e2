//! Where sessiond may send a request of its own (an outbound webhook, an A2A push notification):
//! the URL's form, the operator's `[policy]` host list for that purpose, and the addresses it
//! resolves to. The addresses checked are the ones the delivery connects to (the client is pinned
//! to them), so a name that resolves to a public address when the URL is taken and to an internal
//! one later (DNS rebinding) is refused at delivery.

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;

use super::address::is_internal;
use crate::config::{Policy, host_listed};
use crate::error::{Error, Result};

/// Longest URL a subscription or push config may have.
pub const URL_MAX_CHARS: usize = 2048;

/// What a request is sent for, which decides the `[policy]` list that allows its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// An outbound webhook subscription's delivery: `webhook_hosts`.
    Webhook,
    /// An A2A push notification: `a2a_push_hosts`.
    A2aPush,
}

impl Purpose {
    fn hosts(self, policy: &Policy) -> &[String] {
        match self {
            Purpose::Webhook => &policy.webhook_hosts,
            Purpose::A2aPush => &policy.a2a_push_hosts,
        }
    }

    /// The setting's name in the config file, for errors.
    fn setting(self) -> &'static str {
        match self {
            Purpose::Webhook => "policy.webhook_hosts",
            Purpose::A2aPush => "policy.a2a_push_hosts",
        }
    }

    /// What is sent, for errors.
    fn sent(self) -> &'static str {
        match self {
            Purpose::Webhook => "webhooks",
            Purpose::A2aPush => "push notifications",
        }
    }
}

/// A checked URL and whether the operator lists its host by name or address (which lets it be
/// internal), as opposed to allowing it through `*`.
#[derive(Debug, Clone)]
pub struct Destination {
    pub url: Url,
    pub host: String,
    pub port: u16,
    pub listed: bool,
    pub purpose: Purpose,
}

/// Checks a URL against its form and the policy of its purpose (not its addresses: see
/// [`resolve`]). The error names the field and the setting that decides it.
pub fn check(raw: &str, policy: &Policy, purpose: Purpose) -> Result<Destination> {
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
    let hosts = purpose.hosts(policy);
    let listed = host_listed(hosts, raw);
    let wildcard = hosts.iter().any(|e| e.trim() == "*");
    if !listed && !wildcard {
        return Err(bad(&format!(
            "this server does not send {} to {host}:{port} ({} in its config file)",
            purpose.sent(),
            purpose.setting()
        )));
    }
    if !listed && let Some(ip) = literal_ip(&host) {
        check_public(ip, &host, purpose)?;
    }
    Ok(Destination {
        url,
        host,
        port,
        listed,
        purpose,
    })
}

/// The IP address a URL host is, if it is one (IPv6 hosts come in brackets).
fn literal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn check_public(ip: IpAddr, host: &str, purpose: Purpose) -> Result<()> {
    if is_internal(ip) {
        return Err(Error::invalid(format!(
            "url: {host} is an internal address ({ip}: loopback, private or link-local), which \
             {} reach only when {} lists it",
            purpose.sent(),
            purpose.setting()
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
            check_public(a.ip(), &d.host, d.purpose)?;
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

    fn check(raw: &str, policy: &Policy) -> Result<Destination> {
        super::check(raw, policy, Purpose::Webhook)
    }

    #[test]
    fn each_purpose_is_allowed_by_its_own_list() {
        let push = Policy {
            a2a_push_hosts: vec!["push.example.com".into()],
            ..Policy::default()
        };
        assert!(super::check("https://push.example.com/", &push, Purpose::A2aPush).is_ok());
        let e = super::check("https://push.example.com/", &push, Purpose::Webhook).unwrap_err();
        assert!(e.to_string().contains("policy.webhook_hosts"), "{e}");
        let e = super::check(
            "https://hooks.example.com/",
            &policy(&["hooks.example.com"]),
            Purpose::A2aPush,
        )
        .unwrap_err();
        assert!(e.to_string().contains("policy.a2a_push_hosts"), "{e}");
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
