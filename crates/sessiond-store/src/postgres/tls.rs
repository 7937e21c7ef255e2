//! TLS for the connections to PostgreSQL (the pool's, the migrator's, the listener's and the
//! relay's): rustls with the ring provider (as for every TLS client of sessiond), through
//! `tokio-postgres-rustls`, which also gives SCRAM its channel binding (`tls-server-end-point`).
//!
//! What is checked follows the URL's [`Tls`]: without roots nothing is (libpq's `prefer` and
//! `require`: encryption against eavesdropping only, the handshake's signatures still verified);
//! with roots the chain is, against the PEM file of `sslrootcert` or the system's trust store (the
//! platform verifier reqwest uses for the model endpoints' HTTPS); `verify-full` also checks that
//! the certificate names the host. A refusal says which check failed and against what, so that a
//! start that fails on TLS names its cause.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, DigitallySignedStruct, Error as TlsError, OtherError, RootCertStore,
    SignatureScheme,
};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::url::{RootCert, Tls};

/// What connects: TLS as the URL asks (the driver uses it only when `sslmode` is not `disable`).
#[derive(Clone)]
pub(crate) struct Connector(tokio_postgres_rustls::MakeRustlsConnect);

impl<S> MakeTlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    /// The driver asks for a TLS connector for every connection before it knows whether TLS will
    /// be used, with an empty host name for a Unix socket (where it never is) or an address
    /// without a name (where the driver refuses the handshake itself). The crate would refuse
    /// the empty name and with it the connection: any valid name stands in, never used.
    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        let name = if hostname.is_empty() {
            "localhost"
        } else {
            hostname
        };
        MakeTlsConnect::<S>::make_tls_connect(&mut self.0, name)
    }
}

/// The connector for `tls`. Fails when the roots cannot be loaded (an unreadable or empty
/// `sslrootcert`, a system without CA certificates).
pub(crate) fn connector(tls: &Tls) -> Result<Connector, String> {
    // The process default as well, for whatever else builds a rustls config without naming one
    // (idempotent: a provider installed earlier stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = match &tls.roots {
        None => None,
        Some(RootCert::File(path)) => Some(Chain {
            verifier: file_verifier(path, &provider)?,
            trusted: format!("a CA of sslrootcert={}", path.display()),
        }),
        Some(RootCert::System) => Some(Chain {
            verifier: Arc::new(
                rustls_platform_verifier::Verifier::new(Arc::clone(&provider))
                    .map_err(|e| format!("cannot load the system's CA certificates: {e}"))?,
            ),
            trusted: "a CA the system trusts (name a private CA with sslrootcert=PATH)".into(),
        }),
    };
    let verifier = Verifier {
        chain,
        host_name: tls.checks_host_name(),
        algorithms: provider.signature_verification_algorithms,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Connector(MakeRustlsConnect::new(config)))
}

/// A verifier that trusts only the certificates of the PEM file at `path`.
fn file_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let unreadable = |e: &dyn std::fmt::Display| {
        format!(
            "sslrootcert={}: cannot read its certificates: {e}",
            path.display()
        )
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&e))?;
    if certs.is_empty() {
        return Err(format!(
            "sslrootcert={}: the file holds no PEM certificate",
            path.display()
        ));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| unreadable(&e))?;
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map(|v| v as Arc<dyn ServerCertVerifier>)
        .map_err(|e| unreadable(&e))
}

/// The chain check: a verifier over the trusted roots, and how to name them in a refusal.
#[derive(Debug)]
struct Chain {
    verifier: Arc<dyn ServerCertVerifier>,
    trusted: String,
}

#[derive(Debug)]
struct Verifier {
    /// `None`: the certificate is not checked.
    chain: Option<Chain>,
    /// Whether the certificate must name the host (`verify-full`).
    host_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The chain is checked before the name, so a name error means the chain is good.
        match chain.verifier.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => Ok(verified),
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.host_name => Ok(ServerCertVerified::assertion()),
            Err(TlsError::InvalidCertificate(
                e @ (CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }),
            )) => Err(refusal(format!(
                "the server's certificate does not name the host {} (sslmode=verify-full checks \
                 the host name; connect by a name the certificate has): {e}",
                server_name.to_str()
            ))),
            Err(TlsError::InvalidCertificate(CertificateError::UnknownIssuer)) => {
                Err(refusal(format!(
                    "the server's certificate is not signed by {}",
                    chain.trusted
                )))
            }
            Err(TlsError::InvalidCertificate(e)) => Err(refusal(format!(
                "the server's certificate was refused: {e}"
            ))),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A certificate refusal that reads as its message.
fn refusal(message: String) -> TlsError {
    TlsError::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Refusal(
        message,
    )))))
}

#[derive(Debug)]
struct Refusal(String);

/// The verifier's refusal inside a driver's error, if that is why it failed: rustls shows it in
/// its debug form, so callers say it in their own words.
pub(crate) fn refusal_in(e: &tokio_postgres::Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let tls = cause.downcast_ref::<TlsError>().or_else(|| {
            cause
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<TlsError>())
        });
        if let Some(TlsError::InvalidCertificate(CertificateError::Other(other))) = tls
            && let Some(refusal) = other.0.downcast_ref::<Refusal>()
        {
            return Some(refusal.0.clone());
        }
        source = cause.source();
    }
    None
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::SslMode;

    #[test]
    fn a_missing_or_empty_root_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = connector(&Tls {
            mode: SslMode::VerifyFull,
            roots: Some(RootCert::File(missing.clone())),
        })
        .err()
        .unwrap();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = connector(&Tls {
            mode: SslMode::VerifyCa,
            roots: Some(RootCert::File(empty)),
        })
        .err()
        .unwrap();
        assert!(e.contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn modes_without_roots_build() {
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            connector(&Tls { mode, roots: None }).unwrap();
        }
    }
}
