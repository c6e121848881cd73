//! TLS with the broker's certificate pinned by its SHA-256 fingerprint. The check is rustls's
//! certificate verification step, so a certificate that is not the pinned one fails the handshake
//! before the client has sent a single byte of AMQP: the broker never sees credentials. The
//! handshake's signatures are still verified, so the pinned certificate without its key is refused.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The fingerprint of a certificate's DER, 64 lowercase hex digits.
pub fn fingerprint(der: &[u8]) -> String {
    hex(&Sha256::digest(der))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Accepts exactly the certificate whose fingerprint is pinned, and remembers what it saw so a
/// refusal can name it.
#[derive(Debug)]
pub struct Pinned {
    pin: String,
    provider: Arc<CryptoProvider>,
    seen: Mutex<Option<String>>,
    accepted: AtomicBool,
}

impl Pinned {
    pub fn new(pin: &str) -> Arc<Pinned> {
        Arc::new(Pinned {
            pin: pin.to_ascii_lowercase(),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            seen: Mutex::new(None),
            accepted: AtomicBool::new(false),
        })
    }

    /// The fingerprint of the last certificate that was not the pinned one.
    pub fn mismatch(&self) -> Option<String> {
        self.seen.lock().ok().and_then(|s| s.clone())
    }

    /// Whether the pinned certificate was presented (the handshake reached the real broker).
    pub fn accepted(&self) -> bool {
        self.accepted.load(Ordering::Relaxed)
    }

    /// A client configuration that trusts only the pinned certificate.
    pub fn config(self: &Arc<Self>) -> ClientConfig {
        ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(self.clone())
            .with_no_client_auth()
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The pin is the whole of the trust: names, chains and dates do not matter, because the
        // token that carried the fingerprint is what a node trusts.
        let seen = fingerprint(end_entity.as_ref());
        if seen == self.pin {
            self.accepted.store(true, Ordering::Relaxed);
            Ok(ServerCertVerified::assertion())
        } else {
            if let Ok(mut s) = self.seen.lock() {
                *s = Some(seen);
            }
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pinned_certificate_verifies() {
        let cert = CertificateDer::from(vec![1u8, 2, 3]);
        let pin = fingerprint(cert.as_ref());
        let name = ServerName::try_from("broker").unwrap();
        let p = Pinned::new(&pin.to_ascii_uppercase());
        assert!(p
            .verify_server_cert(&cert, &[], &name, &[], UnixTime::now())
            .is_ok());
        assert_eq!(p.mismatch(), None);
        let other = CertificateDer::from(vec![9u8]);
        assert!(p
            .verify_server_cert(&other, &[], &name, &[], UnixTime::now())
            .is_err());
        assert_eq!(p.mismatch(), Some(fingerprint(&[9u8])));
    }
}
