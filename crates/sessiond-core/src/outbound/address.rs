//! Which addresses an outbound webhook may not reach unless the operator lists them: private,
//! loopback, link-local and other non-public ranges. Checked on the address actually connected
//! to (after resolution), so a name that resolves to an internal address is refused too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is internal: loopback, private (RFC 1918, shared CGNAT space, IPv6 unique
/// local), link-local, unspecified, broadcast or multicast, IPv4-mapped forms included.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_internal(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4_internal(v4),
            None => v6_internal(v6),
        },
    }
}

fn v4_internal(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        // 100.64.0.0/10, carrier-grade NAT's shared space.
        || (a == 100 && (b & 0xc0) == 64)
}

fn v6_internal(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // fc00::/7 unique local, fe80::/10 link-local.
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn internal(s: &str) -> bool {
        is_internal(s.parse().unwrap())
    }

    #[test]
    fn internal_ranges_are_refused() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(internal(a), "{a} should be internal");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!internal(a), "{a} should be public");
        }
    }
}
