//! One AMQP 0-9-1 session with the broker over TLS pinned by fingerprint: dial (each address in
//! turn, a host name resolved at each attempt and each of its addresses tried, the first that
//! answers wins), consume the node's own queue, publish upward, and the
//! one-time enrolment exchange. Built on amqprs over tokio and rustls.

use crate::error::{Error, Result};
use crate::names;
use crate::pin::Pinned;
use crate::resolve::Resolver;
use crate::token::{split_addr, Token};
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicGetArguments, BasicPublishArguments,
    BasicQosArguments, Channel, ConsumerMessage,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::tls::TlsAdaptor;
use amqprs::BasicProperties;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// Where the broker is and how it is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broker {
    /// `host:port`, tried in order.
    pub addrs: Vec<String>,
    /// The SHA-256 of its certificate.
    pub fingerprint: String,
    pub vhost: String,
}

/// A user and password on the broker.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password is never printed, not even in a debug log.
        write!(f, "Credentials {{ user: {:?} }}", self.user)
    }
}

/// What an enrolling node sends the controller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnrolRequest {
    pub token: String,
    pub node: String,
    /// The node's own Ed25519 public key, standard base64.
    pub public_key: String,
    pub profile: serde_json::Value,
    pub inventory: serde_json::Value,
}

/// What the controller answers: the node's identity and its broker credentials.
#[derive(Clone, Serialize, Deserialize)]
pub struct Identity {
    pub node: String,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Identity {{ node: {:?}, user: {:?} }}",
            self.node, self.user
        )
    }
}

/// An open connection with one channel.
pub struct Session {
    pub addr: String,
    pub conn: Connection,
    pub chan: Channel,
}

fn amqp(addr: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Amqp {
        addr: addr.into(),
        what: format!("{what}: {e}"),
    }
}

/// Opens a session with the first address of `broker` that answers, names resolved by the
/// system's files (`/etc/hosts`, `/etc/resolv.conf`): [`open_with`] and [`Resolver::default`].
pub async fn open(broker: &Broker, creds: &Credentials, deadline: Duration) -> Result<Session> {
    open_with(broker, creds, &Resolver::default(), deadline).await
}

/// Opens a session with the first address of `broker` that answers: each of its `host:port` in
/// turn, a host name resolved now by `resolver` (so again on every attempt) and each of its
/// addresses tried in turn, the resolution and each address within `deadline`. A certificate
/// that is not the pinned one fails that address before anything is sent; the error of the last
/// address is returned when none answers.
pub async fn open_with(
    broker: &Broker,
    creds: &Credentials,
    resolver: &Resolver,
    deadline: Duration,
) -> Result<Session> {
    let mut last = Error::Dial {
        addr: "-".into(),
        what: "no broker address".into(),
    };
    for addr in &broker.addrs {
        let (host, port) = match split_addr(addr) {
            Ok(hp) => hp,
            Err(what) => {
                last = Error::Dial {
                    addr: addr.clone(),
                    what: what.to_string(),
                };
                continue;
            }
        };
        let ips = match tokio::time::timeout(deadline, resolver.lookup(&host)).await {
            Ok(Ok(ips)) => ips,
            Ok(Err(e)) => {
                tracing::debug!(addr = %addr, error = %e, "broker name did not resolve");
                last = e;
                continue;
            }
            Err(_) => {
                last = Error::Resolve {
                    name: host.clone(),
                    what: format!("no address within {deadline:?}"),
                };
                continue;
            }
        };
        let named = host.parse::<IpAddr>().is_err();
        for ip in ips {
            // The address named in messages: the token's, and what its name resolved to.
            let shown = if named {
                format!("{addr} at {ip}")
            } else {
                addr.clone()
            };
            let dial = open_one(&shown, ip, port, &host, broker, creds);
            match tokio::time::timeout(deadline, dial).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => {
                    tracing::debug!(addr = %shown, error = %e, "broker address did not answer");
                    last = e;
                }
                Err(_) => {
                    last = Error::TimedOut {
                        addr: shown,
                        waited: deadline,
                    }
                }
            }
        }
    }
    Err(last)
}

/// One TLS connection to `ip:port`, the certificate checked against the pin (the server name
/// sent is `host`, the token's, which the pin does not depend on).
async fn open_one(
    addr: &str,
    ip: IpAddr,
    port: u16,
    host: &str,
    broker: &Broker,
    creds: &Credentials,
) -> Result<Session> {
    let pinned = Pinned::new(&broker.fingerprint);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(pinned.config()));
    // amqprs dials `host:port` as one string: an IPv6 address goes in brackets, so that it is
    // read as an address and never handed to the C library's resolver.
    let dial_host = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let mut args = OpenConnectionArguments::new(&dial_host, port, &creds.user, &creds.password);
    args.virtual_host(&broker.vhost)
        .heartbeat(30)
        .connection_name(&creds.user)
        .tls_adaptor(TlsAdaptor::new(connector, host.to_string()));
    let conn = match Connection::open(&args).await {
        Ok(c) => c,
        Err(e) => {
            if let Some(seen) = pinned.mismatch() {
                return Err(Error::Fingerprint {
                    addr: addr.into(),
                    seen,
                    pinned: broker.fingerprint.clone(),
                });
            }
            let text = e.to_string();
            // RabbitMQ answers a refused login by closing the socket (amqprs does not ask for
            // the authentication_failure_close capability): after a handshake with the pinned
            // certificate, a close during the opening is the broker refusing the credentials.
            let closed_at_login = pinned.accepted() && text.contains("peer shutdown");
            // words read: amqprs's error, which gives the broker's reply code only in its text.
            if text.contains("ACCESS_REFUSED") || text.contains("403") || closed_at_login {
                return Err(Error::Refused {
                    addr: addr.into(),
                    user: creds.user.clone(),
                });
            }
            return Err(Error::Dial {
                addr: addr.into(),
                what: text,
            });
        }
    };
    let chan = conn
        .open_channel(None)
        .await
        .map_err(|e| amqp(addr, "opening a channel", e))?;
    Ok(Session {
        addr: addr.into(),
        conn,
        chan,
    })
}

impl Session {
    /// Starts consuming `queue` with manual acknowledgement, at most `prefetch` unacknowledged.
    pub async fn consume(
        &self,
        queue: &str,
        prefetch: u16,
    ) -> Result<UnboundedReceiver<ConsumerMessage>> {
        self.chan
            .basic_qos(BasicQosArguments::new(0, prefetch, false))
            .await
            .map_err(|e| amqp(&self.addr, "setting the prefetch", e))?;
        let mut args = BasicConsumeArguments::new(queue, "");
        args.manual_ack(true);
        let (_, rx) = self
            .chan
            .basic_consume_rx(args.finish())
            .await
            .map_err(|e| amqp(&self.addr, &format!("consuming queue {queue}"), e))?;
        Ok(rx)
    }

    /// Publishes `body` to `exchange` under `key`.
    pub async fn publish(
        &self,
        exchange: &str,
        key: &str,
        kind: &str,
        body: Vec<u8>,
    ) -> Result<()> {
        let props = BasicProperties::default()
            .with_content_type("application/json")
            .with_message_type(kind)
            .with_timestamp(crate::token::now_secs())
            .finish();
        self.chan
            .basic_publish(props, body, BasicPublishArguments::new(exchange, key))
            .await
            .map_err(|e| amqp(&self.addr, &format!("publishing {key} to {exchange}"), e))
    }

    /// Acknowledges one delivery.
    pub async fn ack(&self, tag: u64) -> Result<()> {
        self.chan
            .basic_ack(BasicAckArguments::new(tag, false))
            .await
            .map_err(|e| amqp(&self.addr, "acknowledging a delivery", e))
    }

    /// Closes the connection politely (the broker logs a clean close, not a lost peer).
    pub async fn close(self) {
        let _ = self.chan.close().await;
        let _ = self.conn.close().await;
    }
}

/// Enrols with `token`: dials the broker (the pin checked before anything is sent), presents the
/// one-time secret, takes the token's one reply (the node's identity and credentials), sends the
/// node's public key, profile and inventory, and only then acknowledges the reply, so an
/// enrolment cut off half way leaves the token usable. An empty reply queue means the token was
/// already used.
pub async fn enrol(
    token: &Token,
    request: &EnrolRequest,
    resolver: &Resolver,
    deadline: Duration,
) -> Result<Identity> {
    let broker = token.broker();
    let creds = Credentials {
        user: names::enrol_user(&token.id),
        password: token.secret.clone(),
    };
    let work = async {
        let s = open_with(&broker, &creds, resolver, deadline).await?;
        let mut get = BasicGetArguments::new(&names::enrol_queue(&token.id));
        get.no_ack(false);
        let got = s
            .chan
            .basic_get(get.finish())
            .await
            .map_err(|e| amqp(&s.addr, "taking the enrolment reply", e))?;
        let Some((ok, _, body)) = got else {
            s.close().await;
            return Err(Error::Enrolment {
                token: token.id.clone(),
                what: "the token was already used (its reply is gone)".into(),
            });
        };
        let identity: Identity = serde_json::from_slice(&body).map_err(|e| Error::Enrolment {
            token: token.id.clone(),
            what: format!("the reply does not read: {e}"),
        })?;
        if identity.node != token.node {
            return Err(Error::Enrolment {
                token: token.id.clone(),
                what: format!(
                    "the reply is for node {:?}, the token for {:?}",
                    identity.node, token.node
                ),
            });
        }
        s.publish(
            names::ENROL_EXCHANGE,
            &names::enrol_key(&token.id),
            "enrol",
            serde_json::to_vec(request).expect("a request serializes"),
        )
        .await?;
        s.ack(ok.delivery_tag()).await?;
        s.close().await;
        Ok(identity)
    };
    match tokio::time::timeout(deadline * 2, work).await {
        Ok(r) => r,
        Err(_) => Err(Error::TimedOut {
            addr: token.brokers.join(", "),
            waited: deadline * 2,
        }),
    }
}
