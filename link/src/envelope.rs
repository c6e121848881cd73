//! The signed envelope, after DSSE: a payload type, the payload in base64 and Ed25519 signatures
//! over the pre-authentication encoding `DSSEv1 <len> <type> <len> <payload>`, so a signature can
//! never be moved to a payload of another type. A declaration's payload binds the node's id, a
//! version that only grows and an expiry; [`verify_declaration`] checks all of them with strict
//! Ed25519 verification against the pinned controller key. Reports and heartbeats are sealed the
//! same way with the node's own key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

/// The payload type of a declaration sent to a node.
pub const DECLARATION: &str = "application/vnd.mesh-host.declaration.v1+json";
/// The payload type of a node's report after an apply.
pub const REPORT: &str = "application/vnd.mesh-host.report.v1+json";
/// The payload type of a node's heartbeat.
pub const HEARTBEAT: &str = "application/vnd.mesh-host.heartbeat.v1+json";
/// The payload type of a node's word that it refused something the link delivered.
pub const REFUSAL: &str = "application/vnd.mesh-host.refusal.v1+json";

/// At most this many signatures are looked at, so a hostile envelope cannot make a node spend.
const MAX_SIGNATURES: usize = 4;

/// Why an envelope was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed: {0}")]
    Malformed(String),
    #[error("payload type {0:?} is not {DECLARATION}")]
    WrongType(String),
    #[error("no signature by the pinned controller key")]
    Unsigned,
    #[error("it is for node {for_node:?}, this node is {this:?}")]
    OtherNode { for_node: String, this: String },
    #[error("version {version} is not newer than {last}, the last accepted (a replay)")]
    Replayed { version: u64, last: u64 },
    #[error("version {version} expired {} ago", crate::human::duration(*.ago))]
    Expired { version: u64, ago: u64 },
}

impl Refusal {
    /// A short word for the kind, for logs and the refusal sent upward.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::WrongType(_) => "wrong-type",
            Refusal::Unsigned => "forged",
            Refusal::OtherNode { .. } => "other-node",
            Refusal::Replayed { .. } => "replayed",
            Refusal::Expired { .. } => "expired",
        }
    }
}

/// The envelope as it travels.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Standard base64 of the payload bytes.
    pub payload: String,
    pub signatures: Vec<Sig>,
}

/// One signature.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sig {
    #[serde(default)]
    pub keyid: String,
    /// Standard base64 of the 64 signature bytes.
    pub sig: String,
}

/// What a declaration's payload binds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bound {
    pub node: String,
    pub version: u64,
    /// Seconds since the epoch after which the declaration is refused.
    pub expires: u64,
    /// The declaration itself, handed to the core as bytes.
    pub declaration: serde_json::Value,
}

/// A declaration that verified: the core gets the bytes and the version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub version: u64,
    pub expires: u64,
    pub declaration: Vec<u8>,
    /// Older declarations that verified and were waiting in the queue with this one, acknowledged
    /// without being applied: a node back after an absence applies only the newest (the link
    /// fills this in; verifying one envelope leaves it empty).
    pub superseded: Vec<u64>,
}

/// DSSE's pre-authentication encoding.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// Signs `payload` of `payload_type` and returns the envelope's JSON bytes.
pub fn seal(key: &SigningKey, keyid: &str, payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let sig = key.sign(&pae(payload_type, payload));
    serde_json::to_vec(&Envelope {
        payload_type: payload_type.into(),
        payload: STANDARD.encode(payload),
        signatures: vec![Sig {
            keyid: keyid.into(),
            sig: STANDARD.encode(sig.to_bytes()),
        }],
    })
    .expect("an envelope serializes")
}

/// Opens an envelope of `payload_type` signed by `key` (strict verification) and returns the
/// payload bytes.
pub fn open(bytes: &[u8], key: &VerifyingKey, payload_type: &str) -> Result<Vec<u8>, Refusal> {
    let env: Envelope =
        serde_json::from_slice(bytes).map_err(|e| Refusal::Malformed(e.to_string()))?;
    if env.payload_type != payload_type {
        return Err(Refusal::WrongType(env.payload_type));
    }
    let payload = STANDARD
        .decode(&env.payload)
        .map_err(|e| Refusal::Malformed(format!("payload: {e}")))?;
    if env.signatures.is_empty() {
        return Err(Refusal::Unsigned);
    }
    let msg = pae(&env.payload_type, &payload);
    for s in env.signatures.iter().take(MAX_SIGNATURES) {
        let Ok(raw) = STANDARD.decode(&s.sig) else {
            continue;
        };
        let Ok(arr) = <[u8; 64]>::try_from(raw.as_slice()) else {
            continue;
        };
        if key
            .verify_strict(&msg, &Signature::from_bytes(&arr))
            .is_ok()
        {
            return Ok(payload);
        }
    }
    Err(Refusal::Unsigned)
}

/// Verifies a declaration for node `this`: the controller's signature, the node, a version newer
/// than `last`, and its expiry against `now` (seconds since the epoch).
pub fn verify_declaration(
    bytes: &[u8],
    controller: &VerifyingKey,
    this: &str,
    last: u64,
    now: u64,
) -> Result<Verified, Refusal> {
    let payload = open(bytes, controller, DECLARATION)?;
    let bound: Bound = serde_json::from_slice(&payload)
        .map_err(|e| Refusal::Malformed(format!("payload: {e}")))?;
    if bound.node != this {
        return Err(Refusal::OtherNode {
            for_node: bound.node,
            this: this.into(),
        });
    }
    if bound.version <= last {
        return Err(Refusal::Replayed {
            version: bound.version,
            last,
        });
    }
    if bound.expires <= now {
        return Err(Refusal::Expired {
            version: bound.version,
            ago: now - bound.expires,
        });
    }
    Ok(Verified {
        version: bound.version,
        expires: bound.expires,
        declaration: serde_json::to_vec(&bound.declaration).expect("a JSON value serializes"),
        superseded: Vec::new(),
    })
}

/// Seals a declaration for `node` (the controller's side, used by the lab's stand-in).
pub fn seal_declaration(
    key: &SigningKey,
    node: &str,
    version: u64,
    expires: u64,
    declaration: serde_json::Value,
) -> Vec<u8> {
    let bound = Bound {
        node: node.into(),
        version,
        expires,
        declaration,
    };
    seal(
        key,
        "controller",
        DECLARATION,
        &serde_json::to_vec(&bound).expect("a payload serializes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controller() -> SigningKey {
        SigningKey::from_bytes(&[1; 32])
    }

    fn sealed(node: &str, version: u64, expires: u64) -> Vec<u8> {
        seal_declaration(
            &controller(),
            node,
            version,
            expires,
            json!({"resources": []}),
        )
    }

    fn check(bytes: &[u8], last: u64) -> Result<Verified, Refusal> {
        verify_declaration(bytes, &controller().verifying_key(), "a", last, 100)
    }

    #[test]
    fn a_signed_declaration_for_this_node_verifies_and_keeps_its_bytes() {
        let v = check(&sealed("a", 3, 200), 2).unwrap();
        assert_eq!(v.version, 3);
        assert_eq!(v.declaration, br#"{"resources":[]}"#);
    }

    #[test]
    fn each_kind_of_bad_envelope_is_refused_with_its_reason() {
        let other_key = SigningKey::from_bytes(&[2; 32]);
        let forged = seal_declaration(&other_key, "a", 3, 200, json!({}));
        assert_eq!(check(&forged, 0), Err(Refusal::Unsigned));
        assert!(matches!(
            check(&sealed("b", 3, 200), 0),
            Err(Refusal::OtherNode { .. })
        ));
        assert_eq!(
            check(&sealed("a", 3, 200), 3),
            Err(Refusal::Replayed {
                version: 3,
                last: 3
            })
        );
        assert_eq!(
            check(&sealed("a", 4, 90), 3),
            Err(Refusal::Expired {
                version: 4,
                ago: 10
            })
        );
        assert!(matches!(check(b"{}", 0), Err(Refusal::Malformed(_))));
        let report = seal(&controller(), "", REPORT, b"{}");
        assert!(matches!(check(&report, 0), Err(Refusal::WrongType(_))));
    }

    #[test]
    fn a_payload_changed_after_signing_is_refused() {
        let mut env: Envelope = serde_json::from_slice(&sealed("a", 3, 200)).unwrap();
        let tampered = serde_json::to_vec(&Bound {
            node: "a".into(),
            version: 3,
            expires: 200,
            declaration: json!({"resources": [{"evil": true}]}),
        })
        .unwrap();
        env.payload = STANDARD.encode(tampered);
        let bytes = serde_json::to_vec(&env).unwrap();
        assert_eq!(check(&bytes, 0), Err(Refusal::Unsigned));
    }

    #[test]
    fn a_signature_over_another_type_does_not_carry_over() {
        // The same payload signed as a report: the PAE binds the type, so relabelling fails.
        let payload = serde_json::to_vec(&Bound {
            node: "a".into(),
            version: 3,
            expires: 200,
            declaration: json!({}),
        })
        .unwrap();
        let mut env: Envelope =
            serde_json::from_slice(&seal(&controller(), "", REPORT, &payload)).unwrap();
        env.payload_type = DECLARATION.into();
        assert_eq!(
            check(&serde_json::to_vec(&env).unwrap(), 0),
            Err(Refusal::Unsigned)
        );
    }

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(pae("t", b"hi"), b"DSSEv1 1 t 2 hi");
    }
}
