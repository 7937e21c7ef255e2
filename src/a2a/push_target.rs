//! Where a push notification may go: the URL's form, the operator's `[policy]`
//! `a2a_push_hosts`, and the addresses it resolves to. The addresses checked are the ones the
//! delivery connects to (the client is pinned to them), so a name that resolves to an internal
//! address at delivery time (DNS rebinding) is refused then.

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;

use crate::config::Policy;
use crate::outbound::address::is_internal;

/// Longest URL a config may have.
pub const URL_MAX_CHARS: usize = 2048;

/// A checked URL, and whether the operator lists its host by name or address (which lets it be
/// internal) rather than allowing it through `*`.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: Url,
    pub host: String,
    pub port: u16,
    pub listed: bool,
}

/// Whether `entries` name the host (any port) or `host:port`.
fn listed(entries: &[String], host: &str, port: u16) -> bool {
    let with_port = format!("{host}:{port}");
    entries.iter().any(|e| {
        let e = e.trim().to_ascii_lowercase();
        e == host || e == with_port
    })
}

fn literal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn internal(ip: IpAddr, host: &str) -> String {
    format!(
        "url: {host} is an internal address ({ip}: loopback, private or link-local), which push \
         notifications reach only when policy.a2a_push_hosts lists it"
    )
}

/// Checks a config's URL against its form and the policy; the error names what decides it.
pub fn check(raw: &str, policy: &Policy) -> Result<Target, String> {
    if raw.chars().count() > URL_MAX_CHARS || raw.chars().any(char::is_control) {
        return Err(format!(
            "url: at most {URL_MAX_CHARS} characters, no control characters"
        ));
    }
    let url = Url::parse(raw).map_err(|e| format!("url: not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("url: an http or https URL".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url: may not hold a user name or password".into());
    }
    let host = url
        .host_str()
        .ok_or("url: has no host")?
        .to_ascii_lowercase();
    let port = url.port_or_known_default().ok_or("url: has no port")?;
    let is_listed = listed(&policy.a2a_push_hosts, &host, port);
    let wildcard = policy.a2a_push_hosts.iter().any(|e| e.trim() == "*");
    if !is_listed && !wildcard {
        return Err(format!(
            "url: this server does not send push notifications to {host}:{port} \
             (policy.a2a_push_hosts in its config file)"
        ));
    }
    if !is_listed
        && let Some(ip) = literal_ip(&host)
        && is_internal(ip)
    {
        return Err(internal(ip, &host));
    }
    Ok(Target {
        url,
        host,
        port,
        listed: is_listed,
    })
}

/// The addresses to connect to, every one public unless the policy lists the host: a host that
/// resolves to an internal address is refused whole.
pub async fn resolve(t: &Target) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = match literal_ip(&t.host) {
        Some(ip) => vec![SocketAddr::new(ip, t.port)],
        None => tokio::net::lookup_host((t.host.as_str(), t.port))
            .await
            .map_err(|e| format!("url: {} does not resolve ({e})", t.host))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(format!("url: {} resolves to no address", t.host));
    }
    if !t.listed
        && let Some(a) = addrs.iter().find(|a| is_internal(a.ip()))
    {
        return Err(internal(a.ip(), &t.host));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str]) -> Policy {
        Policy {
            a2a_push_hosts: hosts.iter().map(|h| h.to_string()).collect(),
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
        let t = check("http://localhost:9/", &policy(&["*"])).unwrap();
        assert!(resolve(&t).await.is_err());
        let t = check("http://localhost:9/", &policy(&["localhost"])).unwrap();
        assert!(resolve(&t).await.is_ok());
    }
}
