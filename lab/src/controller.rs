//! The controller's stand-in, for the link's tests, the lab and the fleet benchmark (never in the
//! product binary): it issues enrolment tokens (the node's broker user, permissions, queue and the
//! token's one reply, made through `rabbitmqctl import_definitions` with a deadline), reads
//! enrolment requests and records each node's public key, signs and publishes declarations, and
//! reads reports, heartbeats and refusals, verifying each by the node's key. It keeps the records
//! of what each node owns from its last report, and hands them back (the declaration's
//! `recovered`) with the first declaration after that node enrols again.

use crate::broker::{Ctl, Rabbit, ADMIN_USER};
use crate::error::{Error, Result};
use amqprs::channel::{
    BasicConsumeArguments, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments,
    QueueDeleteArguments, QueuePurgeArguments,
};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{SigningKey, VerifyingKey};
use link::names;
use serde_json::{json, Value};
use sha2::Digest as _;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// One message a node sent upward.
#[derive(Debug, Clone)]
pub struct Upward {
    /// `report`, `heartbeat` or `refusal`.
    pub kind: String,
    pub node: String,
    /// The payload, verified by the node's key (or `Null` if it did not verify).
    pub payload: Value,
    /// Whether it verified by the node's recorded key.
    pub verified: bool,
    /// When the controller read it.
    pub at: Instant,
}

/// A token and what the controller keeps about it.
#[derive(Debug, Clone)]
pub struct Issued {
    pub token: link::Token,
    pub text: String,
    /// The node's broker password, given in the token's one reply.
    pub password: String,
}

/// The controller's stand-in, connected to the broker as its administrator.
pub struct Controller {
    rt: tokio::runtime::Runtime,
    session: Option<link::Session>,
    upward: UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    enrolments: UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    ctl: Ctl,
    /// The controller's signing key; its public half goes into every token.
    pub key: SigningKey,
    pub broker: link::Broker,
    /// Node id → the node's public key, from its enrolment.
    pub nodes: HashMap<String, VerifyingKey>,
    /// Token id → node id, for tokens whose request has not been read.
    open_tokens: HashMap<String, String>,
    /// Names this controller's own queues.
    tag: String,
    /// Whether its queues and the nodes' are quorum queues (a cluster).
    quorum: bool,
    /// Node id → the records of what it owns, from its last verified report: the mesh's copy
    /// for recovery, never a source.
    owned: HashMap<String, Value>,
    /// Nodes enrolled again since they last reported: their next declaration carries the copy.
    recovering: std::sync::Mutex<HashSet<String>>,
}

fn amqp(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Failed {
        namespace: None,
        program: "controller".into(),
        args: vec![what.into()],
        status: "amqp".into(),
        stderr: e.to_string(),
    }
}

fn link_error(e: link::Error) -> Error {
    amqp("link", e)
}

/// RabbitMQ's SHA-256 password hash: base64 of a 4-byte salt followed by SHA-256(salt ‖ password).
pub fn password_hash(password: &str) -> String {
    let mut salt = [0u8; 4];
    getrandom::fill(&mut salt).expect("random source");
    let mut h = sha2::Sha256::new();
    h.update(salt);
    h.update(password.as_bytes());
    let mut out = salt.to_vec();
    out.extend_from_slice(&h.finalize());
    STANDARD.encode(out)
}

/// The definition of broker user `name` with `password`, no tags.
fn user_definition(name: &str, password: &str) -> Value {
    json!({"name": name, "password_hash": password_hash(password),
           "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []})
}

/// The definitions that make node `node`'s broker user with `password`: it may read its own
/// queue and publish to the reports exchange under its own routing keys, nothing else.
pub fn node_definitions(node: &str, password: &str, vhost: &str) -> (Value, Value, Value) {
    let user = names::node_user(node);
    let keys = format!(
        "^(report|heartbeat|refusal)\\.{}$",
        names::exactly(node)
            .trim_start_matches('^')
            .trim_end_matches('$')
    );
    (
        user_definition(&user, password),
        json!({"user": user, "vhost": vhost, "configure": "^$",
               "write": names::exactly(names::REPORTS_EXCHANGE),
               "read": names::exactly(&names::node_queue(node))}),
        json!({"user": user, "vhost": vhost, "exchange": names::REPORTS_EXCHANGE,
               "write": keys, "read": "^$"}),
    )
}

/// `x-queue-type: quorum`: the queue replicated on a majority of the cluster's members.
fn quorum_arguments() -> amqprs::FieldTable {
    let mut t = amqprs::FieldTable::new();
    t.insert(
        "x-queue-type".try_into().expect("a field name"),
        amqprs::FieldValue::S("quorum".try_into().expect("a string")),
    );
    t
}

type Opened = (
    link::Session,
    UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    UnboundedReceiver<amqprs::channel::ConsumerMessage>,
);

/// Opens the administrator's session with `rabbit` (the broker of `broker`'s pin, reached at its
/// own address), declares the mesh's exchanges and this controller's queues.
fn open_session(
    rt: &tokio::runtime::Runtime,
    rabbit: &Rabbit,
    broker: &link::Broker,
    tag: &str,
    quorum: bool,
) -> Result<Opened> {
    let admin = link::Credentials {
        user: ADMIN_USER.into(),
        password: rabbit.admin_password.clone(),
    };
    let only = link::Broker {
        addrs: vec![rabbit.addr()],
        ..broker.clone()
    };
    rt.block_on(async {
        let s = link::open(&only, &admin, Duration::from_secs(30))
            .await
            .map_err(link_error)?;
        for x in [names::REPORTS_EXCHANGE, names::ENROL_EXCHANGE] {
            let mut a = ExchangeDeclareArguments::new(x, "topic");
            a.durable(true);
            s.chan
                .exchange_declare(a.finish())
                .await
                .map_err(|e| amqp("declaring an exchange", e))?;
        }
        // Queues of this controller's own, each bound to everything: several controllers (tests
        // running at once) each see every message and keep those of their own nodes and tokens.
        // They are durable, so what nodes send while the controller is away (a broker restart)
        // waits for it; they are deleted when it is dropped.
        let upward_q = format!("ctl.{tag}.upward");
        let enrol_q = format!("ctl.{tag}.enrol");
        for (q, x) in [
            (upward_q.as_str(), names::REPORTS_EXCHANGE),
            (enrol_q.as_str(), names::ENROL_EXCHANGE),
        ] {
            let mut a = QueueDeclareArguments::new(q);
            a.durable(true);
            if quorum {
                a.arguments(quorum_arguments());
            }
            s.chan
                .queue_declare(a.finish())
                .await
                .map_err(|e| amqp("declaring a queue", e))?;
            s.chan
                .queue_bind(QueueBindArguments::new(q, x, "#"))
                .await
                .map_err(|e| amqp("binding a queue", e))?;
        }
        let consume = |q: &str| {
            let mut a = BasicConsumeArguments::new(q, "");
            a.manual_ack(false);
            a.finish()
        };
        let (_, upward) = s
            .chan
            .basic_consume_rx(consume(&upward_q))
            .await
            .map_err(|e| amqp("consuming the upward queue", e))?;
        let (_, enrolments) = s
            .chan
            .basic_consume_rx(consume(&enrol_q))
            .await
            .map_err(|e| amqp("consuming the enrolments queue", e))?;
        Ok::<_, Error>((s, upward, enrolments))
    })
}

impl Drop for Controller {
    fn drop(&mut self) {
        // amqprs closes a connection from a task when it is dropped: inside the runtime.
        if let Some(s) = &self.session {
            for q in [
                format!("ctl.{}.upward", self.tag),
                format!("ctl.{}.enrol", self.tag),
            ] {
                let _ = self.rt.block_on(async {
                    tokio::time::timeout(
                        Duration::from_secs(5),
                        s.chan.queue_delete(QueueDeleteArguments::new(&q)),
                    )
                    .await
                });
            }
        }
        let _g = self.rt.enter();
        self.session.take();
    }
}

impl Controller {
    fn session(&self) -> &link::Session {
        self.session
            .as_ref()
            .expect("a controller has a session until dropped")
    }

    /// Connects to `rabbit` as its administrator with a fresh signing key and declares the
    /// mesh's exchanges and the controller's own queues.
    pub fn connect(rabbit: &Rabbit) -> Result<Controller> {
        Self::connect_to(rabbit, vec![rabbit.addr()])
    }

    /// Like [`Controller::connect`], with the addresses tokens name (a cluster names several).
    pub fn connect_to(rabbit: &Rabbit, addrs: Vec<String>) -> Result<Controller> {
        Self::connect_with(rabbit, addrs, false)
    }

    /// Like [`Controller::connect_to`] on a cluster: its own queues and every node's queue are
    /// quorum queues, replicated on a majority of the members, so they outlive any one member.
    pub fn connect_quorum(rabbit: &Rabbit, addrs: Vec<String>) -> Result<Controller> {
        Self::connect_with(rabbit, addrs, true)
    }

    fn connect_with(rabbit: &Rabbit, addrs: Vec<String>, quorum: bool) -> Result<Controller> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| Error::io("tokio runtime", e))?;
        let broker = link::Broker {
            addrs,
            fingerprint: rabbit.fingerprint.clone(),
            vhost: "/".into(),
        };
        let tag = link::random_hex(4).map_err(link_error)?;
        let (session, upward, enrolments) = open_session(&rt, rabbit, &broker, &tag, quorum)?;
        Ok(Controller {
            rt,
            session: Some(session),
            upward,
            enrolments,
            ctl: rabbit.ctl().clone(),
            key: link::generate_key().map_err(link_error)?,
            broker,
            nodes: HashMap::new(),
            open_tokens: HashMap::new(),
            tag,
            quorum,
            owned: HashMap::new(),
            recovering: std::sync::Mutex::new(HashSet::new()),
        })
    }

    /// Connects again (after the broker restarted), keeping the key, the nodes and the tokens.
    pub fn reconnect(&mut self, rabbit: &Rabbit) -> Result<()> {
        let (session, upward, enrolments) =
            open_session(&self.rt, rabbit, &self.broker, &self.tag, self.quorum)?;
        // The old session is dropped inside the runtime (amqprs closes from a task).
        let _g = self.rt.enter();
        self.session = Some(session);
        self.upward = upward;
        self.enrolments = enrolments;
        Ok(())
    }

    /// Issues a token for `node`, valid `ttl`. A token for a node that already has an identity
    /// revokes it first: its broker user is deleted and its connections closed.
    pub fn issue(&mut self, node: &str, ttl: Duration) -> Result<Issued> {
        self.revoke(node)?;
        let id = link::random_hex(8).map_err(link_error)?;
        let secret = link::random_hex(32).map_err(link_error)?;
        let password = link::random_hex(24).map_err(link_error)?;
        let vhost = self.broker.vhost.clone();
        let enrol_user = names::enrol_user(&id);
        let (u, p, t) = node_definitions(node, &password, &vhost);
        let queue_args = if self.quorum {
            json!({"x-queue-type": "quorum"})
        } else {
            json!({})
        };
        let defs = json!({
            "users": [
                u,
                user_definition(&enrol_user, &secret),
            ],
            "permissions": [
                p,
                {"user": enrol_user, "vhost": vhost, "configure": "^$",
                 "write": names::exactly(names::ENROL_EXCHANGE),
                 "read": names::exactly(&names::enrol_queue(&id))},
            ],
            "topic_permissions": [
                t,
                {"user": enrol_user, "vhost": vhost, "exchange": names::ENROL_EXCHANGE,
                 "write": names::exactly(&names::enrol_key(&id)), "read": "^$"},
            ],
            "queues": [
                {"name": names::node_queue(node), "vhost": vhost, "durable": true,
                 "auto_delete": false, "arguments": queue_args},
                {"name": names::enrol_queue(&id), "vhost": vhost, "durable": true,
                 "auto_delete": false, "arguments": queue_args},
            ],
        });
        self.ctl.import(&defs)?;
        let reply = json!({"node": node, "user": names::node_user(node), "password": password});
        self.publish(
            "",
            &names::enrol_queue(&id),
            serde_json::to_vec(&reply).expect("json"),
        )?;
        // A publish returns once its frames are written, not once the broker has routed them: the
        // token is handed out only when its reply is in its queue, or a node quick to enrol (the
        // static binary, on a cluster) could find the queue empty and read the token as used.
        self.wait_queued(&names::enrol_queue(&id))?;
        let token = link::Token {
            id: id.clone(),
            node: node.into(),
            brokers: self.broker.addrs.clone(),
            fingerprint: self.broker.fingerprint.clone(),
            controller: STANDARD.encode(self.key.verifying_key().as_bytes()),
            secret,
            expires: link::now_secs() + ttl.as_secs().max(1),
            vhost,
        };
        self.open_tokens.insert(id, node.into());
        Ok(Issued {
            text: token.encode(),
            token,
            password,
        })
    }

    /// Deletes `node`'s broker user and closes its connections (nothing if it has none).
    pub fn revoke(&mut self, node: &str) -> Result<()> {
        let user = names::node_user(node);
        let users = self.ctl.run(&["list_users"])?;
        if users
            .stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some(user.as_str()))
        {
            self.ctl.run(&["delete_user", &user])?;
            self.ctl
                .run(&["close_all_user_connections", &user, "identity revoked"])?;
        }
        self.nodes.remove(node);
        Ok(())
    }

    /// Reads enrolment requests for up to `wait`, recording each node's public key, and retires
    /// each request's one-time user and reply queue. Returns the requests read.
    pub fn take_enrolments(&mut self, wait: Duration) -> Result<Vec<link::EnrolRequest>> {
        let deadline = Instant::now() + wait;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self
                .rt
                .block_on(async { tokio::time::timeout(left, self.enrolments.recv()).await });
            let Ok(Some(m)) = m else { break };
            let Some(body) = m.content else { continue };
            let Ok(req) = serde_json::from_slice::<link::EnrolRequest>(&body) else {
                continue;
            };
            // Only a request for a token this controller issued, for the node it was issued for.
            if self.open_tokens.get(&req.token) != Some(&req.node) {
                continue;
            }
            let Ok(key) = link::controller_key(&req.public_key) else {
                continue;
            };
            self.open_tokens.remove(&req.token);
            self.nodes.insert(req.node.clone(), key);
            // The same node enrolled again (a lost store, a reinstall): the copy of what it
            // owned goes with its next declaration.
            if self.owned.contains_key(&req.node) {
                if let Ok(mut r) = self.recovering.lock() {
                    r.insert(req.node.clone());
                }
            }
            self.ctl
                .run(&["delete_user", &names::enrol_user(&req.token)])?;
            let q = names::enrol_queue(&req.token);
            let _ = self.rt.block_on(
                self.session()
                    .chan
                    .queue_delete(QueueDeleteArguments::new(&q)),
            );
            got.push(req);
            if self.open_tokens.is_empty() {
                break;
            }
        }
        Ok(got)
    }

    /// Records a node's public key without an enrolment (the benchmark's provisioned nodes).
    pub fn know(&mut self, node: &str, key: VerifyingKey) {
        self.nodes.insert(node.into(), key);
    }

    /// Makes many node users at once (the benchmark): `(node, password)` pairs.
    pub fn provision(&self, nodes: &[(String, String)]) -> Result<()> {
        let vhost = &self.broker.vhost;
        let (mut users, mut perms, mut topics, mut queues) = (vec![], vec![], vec![], vec![]);
        for (node, password) in nodes {
            let (u, p, t) = node_definitions(node, password, vhost);
            users.push(u);
            perms.push(p);
            topics.push(t);
            queues.push(json!({"name": names::node_queue(node), "vhost": vhost,
                "durable": true, "auto_delete": false, "arguments": {}}));
        }
        self.ctl
            .import(&json!({"users": users, "permissions": perms,
            "topic_permissions": topics, "queues": queues}))
    }

    /// Signs and publishes declaration `decl` for `node` at `version`, valid `ttl`. The first
    /// declaration after `node` enrolled again carries, as `recovered`, the records of what it
    /// owned from its last report (unless `decl` already names some).
    pub fn declare(&self, node: &str, version: u64, ttl: Duration, mut decl: Value) -> Result<()> {
        let recovering = self
            .recovering
            .lock()
            .map(|mut r| r.remove(node))
            .unwrap_or(false);
        if let (true, Some(owned), Some(d)) =
            (recovering, self.owned.get(node), decl.as_object_mut())
        {
            d.entry("recovered").or_insert_with(|| owned.clone());
        }
        let sealed = link::envelope::seal_declaration(
            &self.key,
            node,
            version,
            link::now_secs() + ttl.as_secs(),
            decl,
        );
        self.send_raw(node, sealed)
    }

    /// Signs and publishes `node`'s release at `version`, valid `ttl`: the final declaration,
    /// which names nothing and says so (`"release": true`). The node removes what it owns, sends
    /// its report as the last thing it sends, drops its identity and is hosted again.
    pub fn release(&self, node: &str, version: u64, ttl: Duration) -> Result<()> {
        self.declare(node, version, ttl, release_declaration(node))
    }

    /// Publishes any bytes to `node`'s queue (the tests' forged and replayed envelopes).
    pub fn send_raw(&self, node: &str, body: Vec<u8>) -> Result<()> {
        self.publish("", &names::node_queue(node), body)
    }

    /// Waits up to ten seconds until queue `q` holds a message (a passive declare counts them).
    fn wait_queued(&self, q: &str) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let mut args = QueueDeclareArguments::new(q);
            args.passive(true);
            let got = self
                .rt
                .block_on(self.session().chan.queue_declare(args.finish()))
                .map_err(|e| amqp("counting a token's reply", e))?;
            if matches!(got, Some((_, n, _)) if n >= 1) {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(amqp(
                    "counting a token's reply",
                    format!("queue {q} is still empty 10 s after the reply was published"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn publish(&self, exchange: &str, key: &str, body: Vec<u8>) -> Result<()> {
        self.rt
            .block_on(self.session().publish(exchange, key, "declaration", body))
            .map_err(link_error)
    }

    /// Empties `node`'s queue (a test starting from a known state).
    pub fn purge(&self, node: &str) -> Result<()> {
        self.rt
            .block_on(
                self.session()
                    .chan
                    .queue_purge(QueuePurgeArguments::new(&names::node_queue(node))),
            )
            .map(|_| ())
            .map_err(|e| amqp("purging a queue", e))
    }

    /// The broker's own round trip, for a benchmark's baseline: `n` messages published to a
    /// queue this controller reads, each timed from its publish to its arrival.
    pub fn round_trips(&self, n: usize) -> Result<Vec<Duration>> {
        let q = format!("ctl.{}.echo", self.tag);
        let s = self.session();
        self.rt.block_on(async {
            let mut a = QueueDeclareArguments::new(&q);
            a.exclusive(true).auto_delete(true);
            s.chan
                .queue_declare(a.finish())
                .await
                .map_err(|e| amqp("declaring the echo queue", e))?;
            let mut c = BasicConsumeArguments::new(&q, "");
            c.manual_ack(false);
            let (_, mut rx) = s
                .chan
                .basic_consume_rx(c.finish())
                .await
                .map_err(|e| amqp("consuming the echo queue", e))?;
            let mut sent = Vec::with_capacity(n);
            for i in 0..n {
                sent.push(Instant::now());
                s.publish("", &q, "echo", i.to_string().into_bytes())
                    .await
                    .map_err(link_error)?;
            }
            let mut out = Vec::with_capacity(n);
            while out.len() < n {
                let m = tokio::time::timeout(Duration::from_secs(60), rx.recv())
                    .await
                    .map_err(|e| amqp("waiting for the echo", e))?
                    .ok_or_else(|| amqp("waiting for the echo", "consumer closed"))?;
                let i: usize = String::from_utf8_lossy(&m.content.unwrap_or_default())
                    .parse()
                    .unwrap_or(0);
                out.push(sent[i.min(n - 1)].elapsed());
            }
            out.sort();
            let _ = s.chan.queue_delete(QueueDeleteArguments::new(&q)).await;
            Ok(out)
        })
    }

    /// The next message any node sent upward, within `wait`.
    pub fn next_upward(&mut self, wait: Duration) -> Option<Upward> {
        let m = self
            .rt
            .block_on(async { tokio::time::timeout(wait, self.upward.recv()).await })
            .ok()??;
        let at = Instant::now();
        let key = m.deliver.as_ref()?.routing_key().to_string();
        let (kind, node) = key.split_once('.')?;
        let body = m.content.unwrap_or_default();
        let ty = match kind {
            "report" => link::envelope::REPORT,
            "heartbeat" => link::envelope::HEARTBEAT,
            _ => link::envelope::REFUSAL,
        };
        let opened = self
            .nodes
            .get(node)
            .and_then(|k| link::envelope::open(&body, k, ty).ok());
        let payload = opened
            .as_ref()
            .and_then(|p| serde_json::from_slice::<Value>(p).ok())
            .unwrap_or(Value::Null);
        if kind == "report" && payload["owned"].is_array() {
            self.owned.insert(node.into(), payload["owned"].clone());
        }
        Some(Upward {
            kind: kind.into(),
            node: node.into(),
            verified: opened.is_some(),
            payload,
            at,
        })
    }

    /// The records of what `node` owns, from its last verified report.
    pub fn owned(&self, node: &str) -> Option<&Value> {
        self.owned.get(node)
    }

    /// Waits up to `wait` for a message from `node` of `kind` that verified and satisfies
    /// `pred`; other messages read meanwhile are dropped.
    pub fn wait_for(
        &mut self,
        node: &str,
        kind: &str,
        wait: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Upward> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let u = self.next_upward(left)?;
            if u.node == node && u.kind == kind && u.verified && pred(&u.payload) {
                return Some(u);
            }
        }
    }
}

/// The release of `node` as the controller signs it: mode, nothing taken, no resources, and
/// `"release": true`.
pub fn release_declaration(node: &str) -> Value {
    serde_json::json!({
        "version": 1, "node": node, "mode": "adopted", "taken": [],
        "resources": [], "release": true
    })
}
