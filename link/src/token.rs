//! The enrolment token: one string a person pastes, carrying the broker's addresses, the SHA-256
//! fingerprint of the broker's certificate, the controller's Ed25519 signing key, a one-time
//! secret and an expiry. It is `mesh1.` followed by the URL-safe base64 (no padding) of a JSON
//! object; parsing names every problem at once.

use crate::error::{Error, Result};
use crate::session::Broker;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// What every token starts with; the number is the format's version.
pub const PREFIX: &str = "mesh1.";

/// A token that parsed and is in date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// The token's own id: it names the one-time enrolment user and its reply queue.
    pub id: String,
    /// The node record this token was issued for.
    pub node: String,
    /// The broker's addresses, `host:port`, tried in order (a cluster names several); a host is
    /// an IP address or a name the node resolves itself.
    pub brokers: Vec<String>,
    /// The SHA-256 of the broker certificate's DER, 64 lowercase hex digits.
    pub fingerprint: String,
    /// The controller's Ed25519 public key, standard base64 of its 32 bytes.
    pub controller: String,
    /// The one-time secret (the enrolment user's password).
    pub secret: String,
    /// Seconds since the epoch after which the token is refused.
    pub expires: u64,
    /// The broker's virtual host.
    #[serde(default = "default_vhost")]
    pub vhost: String,
}

fn default_vhost() -> String {
    "/".into()
}

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Token {
    /// The string a person carries.
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a token serializes");
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
    }

    /// Parses and checks a pasted token at time `now` (seconds since the epoch). Every problem
    /// is named; an expired token is refused.
    pub fn parse(text: &str, now: u64) -> Result<Token> {
        let text = text.trim();
        let Some(body) = text.strip_prefix(PREFIX) else {
            return Err(Error::Token(vec![format!(
                "it does not start with {PREFIX:?} (is it the whole token?)"
            )]));
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|e| Error::Token(vec![format!("its body is not URL-safe base64: {e}")]))?;
        let token: Token = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Token(vec![format!("its body is not a token's JSON: {e}")]))?;
        let mut problems = token.problems();
        if token.expires <= now {
            problems.push(format!(
                "expires: it expired {} ago",
                crate::human::duration(now.saturating_sub(token.expires))
            ));
        }
        if problems.is_empty() {
            Ok(token)
        } else {
            Err(Error::Token(problems))
        }
    }

    /// Every field's problem, expiry aside.
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !is_hex(&self.id, 8, 64) {
            p.push(format!("id: {:?} is not 8 to 64 hex digits", self.id));
        }
        if let Err(e) = check_node_id(&self.node) {
            p.push(format!("node: {e}"));
        }
        if self.brokers.is_empty() {
            p.push("brokers: no broker address".into());
        }
        for (i, b) in self.brokers.iter().enumerate() {
            // An address, or a host name the host resolves itself (`resolve`).
            match split_addr(b) {
                Err(e) => p.push(format!("brokers[{i}]: {e}")),
                Ok((host, _)) if host.parse::<std::net::IpAddr>().is_err() => {
                    if let Err(e) = crate::dns::check_name(&host) {
                        p.push(format!("brokers[{i}]: {e}"));
                    }
                }
                Ok(_) => {}
            }
        }
        if !is_hex(&self.fingerprint, 64, 64) {
            p.push(format!(
                "fingerprint: {:?} is not a SHA-256 (64 hex digits)",
                self.fingerprint
            ));
        }
        if let Err(e) = controller_key(&self.controller) {
            p.push(format!("controller: {e}"));
        }
        if !is_hex(&self.secret, 32, 128) {
            p.push("secret: not 32 to 128 hex digits".into());
        }
        if self.vhost.is_empty() || self.vhost.len() > 255 {
            p.push(format!(
                "vhost: {:?} is not a virtual host name",
                self.vhost
            ));
        }
        p
    }

    /// The broker as the token names it: its addresses, its certificate's fingerprint and the
    /// virtual host.
    pub fn broker(&self) -> Broker {
        Broker {
            addrs: self.brokers.clone(),
            fingerprint: self.fingerprint.clone(),
            vhost: self.vhost.clone(),
        }
    }

    /// The controller's key as a verifying key (checked when the token was parsed).
    pub fn controller_key(&self) -> Result<VerifyingKey> {
        controller_key(&self.controller).map_err(|e| Error::Token(vec![format!("controller: {e}")]))
    }
}

/// Why a controller's key is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    #[error("not standard base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("{0} bytes, an Ed25519 key is 32")]
    Length(usize),
    #[error("not an Ed25519 point")]
    NotAPoint,
    #[error("a weak (small-order) key")]
    Weak,
}

/// Reads a standard-base64 Ed25519 public key, refusing weak (small-order) points.
pub fn controller_key(b64: &str) -> std::result::Result<VerifyingKey, BadKey> {
    let bytes = STANDARD.decode(b64)?;
    let arr: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| BadKey::Length(bytes.len()))?;
    let key = VerifyingKey::from_bytes(&arr).map_err(|_| BadKey::NotAPoint)?;
    if key.is_weak() {
        return Err(BadKey::Weak);
    }
    Ok(key)
}

/// Why a node id is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNodeId {
    #[error("{0:?} is not 1 to 63 characters")]
    Length(String),
    #[error("{0:?} has characters other than a-z, 0-9 and '-' (or starts with '-')")]
    Characters(String),
}

/// Why an address is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAddr {
    #[error("{0:?} is not host:port")]
    NotHostPort(String),
    #[error("{0:?} has no host")]
    NoHost(String),
    #[error("{0:?} has no port 1-65535")]
    NoPort(String),
}

/// A node id: what the broker's user and queue names are made of, so it is kept to lowercase
/// letters, digits and dashes.
pub fn check_node_id(id: &str) -> std::result::Result<(), BadNodeId> {
    if id.is_empty() || id.len() > 63 {
        return Err(BadNodeId::Length(id.to_string()));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || id.starts_with('-')
    {
        return Err(BadNodeId::Characters(id.to_string()));
    }
    Ok(())
}

/// Splits `host:port` (an IPv6 host in brackets).
pub fn split_addr(addr: &str) -> std::result::Result<(String, u16), BadAddr> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| BadAddr::NotHostPort(addr.to_string()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(BadAddr::NoHost(addr.to_string()));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| BadAddr::NoPort(addr.to_string()))?;
    Ok((host.to_string(), port))
}

fn is_hex(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Token {
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        Token {
            id: "0123456789abcdef".into(),
            node: "node-a".into(),
            brokers: vec!["127.0.0.1:5671".into(), "[::1]:5672".into()],
            fingerprint: "ab".repeat(32),
            controller: STANDARD.encode(key.verifying_key().as_bytes()),
            secret: "cd".repeat(16),
            expires: 2_000,
            vhost: "/".into(),
        }
    }

    fn problems(text: &str, now: u64) -> Vec<String> {
        match Token::parse(text, now) {
            Err(Error::Token(p)) => p,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_token_round_trips_before_its_expiry() {
        let t = sample();
        assert_eq!(Token::parse(&t.encode(), 1_999).unwrap(), t);
        assert_eq!(
            Token::parse(&format!("  {}\n", t.encode()), 0).unwrap(),
            t,
            "pasted with whitespace around it"
        );
    }

    #[test]
    fn an_expired_token_is_refused_with_how_long_ago() {
        let p = problems(&sample().encode(), 2_010);
        assert_eq!(p, vec!["expires: it expired 10 s ago".to_string()]);
        assert_eq!(
            problems(&sample().encode(), 2_000).len(),
            1,
            "at its expiry"
        );
    }

    #[test]
    fn malformed_tokens_are_refused_with_the_reason() {
        assert!(problems("hello", 0)[0].contains("does not start with"));
        assert!(problems("mesh1.***", 0)[0].contains("not URL-safe base64"));
        let not_json = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(b"[1,2]"));
        assert!(problems(&not_json, 0)[0].contains("not a token's JSON"));
    }

    #[test]
    fn every_bad_field_is_named_at_once() {
        let mut t = sample();
        t.id = "xyz".into();
        t.node = "Node_A".into();
        t.brokers = vec!["nohost".into(), "h:0".into(), "bad_name!:5671".into()];
        t.fingerprint = "12".into();
        t.controller = STANDARD.encode([0u8; 31]);
        t.secret = "short".into();
        let p = problems(&t.encode(), 0);
        for field in [
            "id:",
            "node:",
            "brokers[0]:",
            "brokers[1]:",
            "brokers[2]:",
            "fingerprint:",
            "controller:",
            "secret:",
        ] {
            assert!(p.iter().any(|x| x.starts_with(field)), "{field} in {p:?}");
        }
        assert_eq!(p.len(), 8, "{p:?}");
    }

    #[test]
    fn a_broker_may_be_named_by_host_name() {
        let mut t = sample();
        t.brokers = vec!["broker.mesh.lab:5671".into(), "rabbit-2:5671".into()];
        assert_eq!(Token::parse(&t.encode(), 0).unwrap(), t);
        t.brokers = vec!["-bad.lab:5671".into()];
        assert!(problems(&t.encode(), 0)[0].contains("not a host name"));
    }

    #[test]
    fn a_weak_controller_key_is_refused() {
        // The identity point: every signature "verifies" against it under lax rules.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let e = controller_key(&STANDARD.encode(identity)).unwrap_err();
        assert_eq!(e, super::BadKey::Weak, "{e}");
    }
}
