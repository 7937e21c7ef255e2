//! TLS for the HTTPS requests sessiond makes (model endpoints): rustls with the `ring` crypto
//! provider, verified against the platform's certificates.
//!
//! reqwest is built without a provider of its own (its default, aws-lc-rs, is a large C build),
//! so the provider must be the process default before any HTTP client is built; every client
//! builder in the product goes through [`client_builder`]. Processes that build reqwest clients
//! themselves (the tests, the benchmarks) call [`install_provider`] first.

/// Makes ring the process's default rustls provider (idempotent; a provider installed earlier
/// stays).
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A reqwest client builder with the provider in place.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_provider();
    reqwest::Client::builder()
}

#[cfg(test)]
mod tests {
    /// Building a client needs the provider in place (reqwest panics without one).
    #[test]
    fn a_client_builds_with_the_ring_provider() {
        super::client_builder().build().unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
