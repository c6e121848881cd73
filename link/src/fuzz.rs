//! Fuzz tests of what the link reads from people and the network: the enrolment token (its
//! text, its base64 and the JSON beneath), the signed envelope (its JSON, its payload and
//! the declaration bound in it, re-signed so the checks past the signature are reached); a
//! nameserver's answer is hickory's to read (`resolve.rs`). On the seeded harness in `fuzz/`;
//! `MESH_FUZZ_CASES` scales them (`bench/fuzz`). The token and the envelope also run
//! coverage-guided (bolero) over their corpus in `__fuzz__/`.

use crate::envelope::{self, Refusal, DECLARATION};
use crate::token::{check_node_id, controller_key, split_addr, Token, PREFIX};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::SigningKey;
use fuzz::{mutate, run, Rng};

fn hex(rng: &mut Rng, n: usize) -> String {
    fuzz::hex(&rng.bytes(n))
}

/// A valid token with arbitrary values where its format allows them.
fn token(rng: &mut Rng) -> Token {
    let key = SigningKey::from_bytes(&[7; 32]);
    let brokers = (0..1 + rng.below(3))
        .map(|_| match rng.below(4) {
            0 => format!("10.{}.{}.1:{}", rng.u8(), rng.u8(), 1 + rng.below(65535)),
            1 => format!("[fd00::{:x}]:5671", rng.u16()),
            2 => format!("{}:5671", host_name(rng)),
            _ => "127.0.0.1:5671".to_string(),
        })
        .collect();
    Token {
        id: {
            let n = 4 + rng.below(29);
            hex(rng, n)
        },
        node: format!(
            "n{}",
            rng.word(20).replace(|c: char| !c.is_ascii_lowercase(), "-")
        ),
        brokers,
        fingerprint: hex(rng, 32),
        controller: STANDARD.encode(key.verifying_key().as_bytes()),
        secret: {
            let n = 16 + rng.below(49);
            hex(rng, n)
        },
        expires: 1_000 + rng.below(1 << 40) as u64,
        vhost: "/".into(),
    }
}

#[test]
fn fuzz_enrolment_token() {
    run(
        "link-token",
        3_000,
        |rng| {
            let t = token(rng);
            let text = t.encode();
            assert_eq!(
                Token::parse(&text, 999).ok(),
                Some(t.clone()),
                "a valid token reads back"
            );
            match rng.below(4) {
                // The text as pasted, mutated.
                0 => {
                    let mut b = text.into_bytes();
                    mutate(rng, &mut b);
                    b
                }
                // The JSON beneath the base64, mutated, then encoded again.
                1 | 2 => {
                    let mut json = serde_json::to_vec(&t).unwrap();
                    mutate(rng, &mut json);
                    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json)).into_bytes()
                }
                _ => text.into_bytes(),
            }
        },
        check_token,
    );
}

fn check_token(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(t) = Token::parse(&text, 999) {
        // What parsed encodes and parses to itself, and its parts check again.
        assert_eq!(Token::parse(&t.encode(), 999).ok(), Some(t.clone()));
        assert!(t.controller_key().is_ok());
        assert!(check_node_id(&t.node).is_ok());
        for b in &t.brokers {
            assert!(split_addr(b).is_ok());
        }
    }
    let _ = (
        split_addr(&text),
        check_node_id(&text),
        controller_key(&text),
    );
}

/// A declaration's body: small JSON of any shape, sometimes deeply nested.
fn declaration(rng: &mut Rng) -> serde_json::Value {
    let mut v = serde_json::json!({"files": [{"path": "/etc/x", "content": rng.word(8)}]});
    for _ in 0..rng.below(4) {
        v = serde_json::json!([v, rng.u32()]);
    }
    v
}

#[test]
fn fuzz_signed_envelope() {
    let key = SigningKey::from_bytes(&[9; 32]);
    let controller = key.verifying_key();
    run(
        "link-envelope",
        2_000,
        |rng| {
            let version = 1 + rng.below(100) as u64;
            let sealed =
                envelope::seal_declaration(&key, "node-a", version, 5_000, declaration(rng));
            let v = envelope::verify_declaration(&sealed, &controller, "node-a", 0, 1_000)
                .expect("a sealed declaration verifies");
            assert_eq!(v.version, version);
            match rng.below(4) {
                // The envelope's JSON, mutated: its signature no longer matches, or it no
                // longer reads.
                0 | 1 => {
                    let mut b = sealed;
                    mutate(rng, &mut b);
                    b
                }
                // The payload mutated and signed again, so the bound declaration is read.
                2 => {
                    let mut payload = serde_json::to_vec(&envelope::Bound {
                        node: "node-a".into(),
                        version,
                        expires: 5_000,
                        declaration: declaration(rng),
                    })
                    .unwrap();
                    mutate(rng, &mut payload);
                    envelope::seal(&key, "controller", DECLARATION, &payload)
                }
                _ => sealed,
            }
        },
        |bytes| check_envelope(bytes, &controller),
    );
}

fn check_envelope(bytes: &[u8], controller: &ed25519_dalek::VerifyingKey) {
    match envelope::verify_declaration(bytes, controller, "node-a", 0, 1_000) {
        Ok(v) => {
            assert!(v.version > 0 && v.expires > 1_000);
            assert!(serde_json::from_slice::<serde_json::Value>(&v.declaration).is_ok());
        }
        Err(Refusal::Malformed(_) | Refusal::Unsigned | Refusal::WrongType(_)) => {}
        Err(r) => assert!(!r.kind().is_empty()),
    }
}

// The token and the envelope, coverage-guided (bolero): under `cargo test` each replays its
// committed corpus (`__fuzz__/` beside this file) and random bytes; `cargo bolero test` grows the
// corpus. The bytes are what lies beneath what a fuzzer could not get past by mutation alone:
// the token's JSON (encoded in base64 here), the envelope's payload (signed here).

#[test]
fn coverage_enrolment_token() {
    fuzz::coverage!(
        "link-token",
        1_000,
        |rng| serde_json::to_vec(&token(rng)).unwrap(),
        |json: &[u8]| {
            check_token(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json)).as_bytes());
            check_token(json);
        }
    );
}

#[test]
fn coverage_signed_envelope() {
    let key = SigningKey::from_bytes(&[9; 32]);
    let controller = key.verifying_key();
    fuzz::coverage!(
        "link-envelope",
        1_000,
        |rng| {
            serde_json::to_vec(&envelope::Bound {
                node: "node-a".into(),
                version: 1 + rng.below(100) as u64,
                expires: 5_000,
                declaration: declaration(rng),
            })
            .unwrap()
        },
        |payload: &[u8]| {
            check_envelope(
                &envelope::seal(&key, "controller", DECLARATION, payload),
                &controller,
            );
            check_envelope(payload, &controller);
        }
    );
}

/// A host name: one to four labels of letters and digits.
fn host_name(rng: &mut Rng) -> String {
    (0..1 + rng.below(4))
        .map(|_| {
            let w = rng.word(12).to_ascii_lowercase();
            let w: String = w.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            format!("n{w}")
        })
        .collect::<Vec<_>>()
        .join(".")
}
