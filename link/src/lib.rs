//! mesh-host's link to the mesh: the enrolment token, one outbound TLS connection to the broker
//! (RabbitMQ, AMQP 0-9-1; a broker named by host name resolved by the link itself, from the hosts
//! file and the nameservers of `resolv.conf`) with the broker's certificate pinned by fingerprint
//! and checked before anything is sent, declarations verified every time by the controller's Ed25519 signature
//! (bound to the node, a growing version and an expiry), reports and heartbeats sent upward
//! signed by the node's own key, and reconnection with capped, jittered backoff that a rouse cuts
//! short.
//!
//! The crate knows nothing of the store or of declarations: it hands the core verified bytes
//! through [`Sink`] and takes report bytes through [`Handle`].

mod backoff;
mod dns;
mod driver;
pub mod envelope;
mod error;
pub mod human;
pub mod names;
mod pin;
mod resolve;
mod session;
mod token;

#[cfg(test)]
mod fuzz;

pub use crate::{
    backoff::Backoff,
    driver::{link, spawn_thread, Config, Event, Handle, Receipt, Sink},
    envelope::{Refusal, Verified},
    error::{Error, Result},
    pin::{fingerprint, hex, Pinned},
    resolve::Resolver,
    session::{enrol, open, open_with, Broker, Credentials, EnrolRequest, Identity, Session},
    token::{check_node_id, controller_key, now_secs, split_addr, Token, PREFIX},
};

/// Generates an Ed25519 key from the system's random source (the node's key, made on the node).
pub fn generate_key() -> Result<ed25519_dalek::SigningKey> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Random(e.to_string()))?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// Random bytes as lowercase hex (secrets, ids).
pub fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| Error::Random(e.to_string()))?;
    Ok(hex(&buf))
}
