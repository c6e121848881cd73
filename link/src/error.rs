//! The link's one error type: every message names the broker address, the token field or the
//! envelope part concerned.

use std::time::Duration;

/// Everything that can go wrong between a node and the mesh's broker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The token was refused; every problem is named at once.
    #[error("the token was refused: {}", .0.join("; "))]
    Token(Vec<String>),

    /// The broker presented a certificate other than the pinned one; nothing was sent to it.
    #[error("broker {addr}: its certificate has fingerprint {seen}, not the pinned {pinned}; nothing was sent")]
    Fingerprint {
        addr: String,
        seen: String,
        pinned: String,
    },

    /// A broker's host name did not resolve to any address.
    #[error("broker name {name}: {what}")]
    Resolve { name: String, what: String },

    /// The TCP connection or the TLS handshake failed.
    #[error("broker {addr}: {what}")]
    Dial { addr: String, what: String },

    /// The attempt took longer than its deadline.
    #[error("broker {addr}: no answer within {waited:?}")]
    TimedOut { addr: String, waited: Duration },

    /// A rouse ended the attempt under way.
    #[error("broker {addr}: the attempt was ended by a rouse")]
    Roused { addr: String },

    /// The broker refused the credentials (a used or revoked token, a deleted node user).
    #[error(
        "broker {addr}: the credentials of {user} were refused (used, revoked or never issued)"
    )]
    Refused { addr: String, user: String },

    /// An AMQP operation failed.
    #[error("broker {addr}: {what}")]
    Amqp { addr: String, what: String },

    /// The broker answered, but the enrolment's reply was missing or did not read.
    #[error("enrolment {token}: {what}")]
    Enrolment { token: String, what: String },

    /// An envelope did not verify.
    #[error("envelope refused: {0}")]
    Envelope(#[from] crate::envelope::Refusal),

    /// The system's random source failed.
    #[error("random source: {0}")]
    Random(String),
}

/// The link's result type.
pub type Result<T> = std::result::Result<T, Error>;
