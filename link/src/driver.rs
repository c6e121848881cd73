//! The running link: one outbound connection kept with capped exponential backoff and jitter,
//! the node's queue consumed and every delivery verified, reports and heartbeats published, and
//! a rouse that ends the attempt (or the connection) under way. The core is on the other side of
//! [`Sink`] and [`Handle`]: the link hands it verified declaration bytes and events, and takes
//! report bytes back. It knows nothing of the store or of what a declaration means.

use crate::backoff::Backoff;
use crate::envelope::{self, Refusal, Verified};
use crate::error::Error;
use crate::names;
use crate::resolve::Resolver;
use crate::session::{self, Broker, Credentials, Session};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch, Notify};

/// Everything the link needs to run, handed over by the core from its store.
#[derive(Clone)]
pub struct Config {
    pub node: String,
    pub broker: Broker,
    /// Where the broker's host names are looked up, again at every attempt.
    pub resolver: Resolver,
    pub credentials: Credentials,
    /// The controller's key every declaration must be signed by.
    pub controller: VerifyingKey,
    /// The node's own key, which signs what it sends upward.
    pub node_key: SigningKey,
    /// The last declaration version the core accepted: only newer ones are.
    pub last_version: u64,
    /// When the node last heard from the broker (the core keeps it across restarts).
    pub last_contact: Option<SystemTime>,
    /// Between heartbeats.
    pub heartbeat: Duration,
    /// The backoff's first wait and its cap.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// The longest one attempt to reach one address may take.
    pub attempt_deadline: Duration,
}

/// What the link tells the core.
#[derive(Debug)]
pub enum Event {
    /// Linked to a broker; `unlinked_for` is how long since the last contact (None: never).
    Linked {
        addr: String,
        unlinked_for: Option<Duration>,
    },
    /// The link was lost or an attempt failed; the next attempt is after `retry_in`.
    Unlinked { why: String, retry_in: Duration },
    /// A declaration that verified. The core calls [`Receipt::done`] once it is stored, and only
    /// then is the delivery acknowledged to the broker.
    Declaration(Verified, Receipt),
    /// A delivery that was refused (and acknowledged, so it is not delivered again).
    Refused(Refusal),
    /// The broker was heard from (a heartbeat went out): the core may record the time.
    Contact(SystemTime),
}

/// The core's word that a declaration is stored.
#[derive(Debug)]
pub struct Receipt(Option<oneshot::Sender<()>>);

impl Receipt {
    pub fn done(mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// The core's side of the seam: it is handed the link's events. It must not block.
pub trait Sink: Send + Sync + 'static {
    fn event(&self, event: Event);
}

enum Out {
    Report(Vec<u8>),
    /// The last report: published, then the link stops; the sender is told it went.
    Last(Vec<u8>, std::sync::mpsc::Sender<()>),
}

/// The core's handle on a running link.
#[derive(Clone)]
pub struct Handle {
    out: mpsc::UnboundedSender<Out>,
    rouse: Arc<Notify>,
    stop: watch::Sender<bool>,
    state: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Handle {
    /// Publishes an apply's report (JSON bytes), now or as soon as the link is back.
    pub fn report(&self, payload: Vec<u8>) {
        let _ = self.out.send(Out::Report(payload));
    }

    /// Publishes the last report this link sends (a release's) after every report queued
    /// before it, then stops the link: nothing, not even a heartbeat, follows it. Whether it was
    /// published within `wait`; the link is stopped either way.
    pub fn report_last(&self, payload: Vec<u8>, wait: Duration) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = self.out.send(Out::Last(payload, tx)).is_ok() && rx.recv_timeout(wait).is_ok();
        self.stop();
        sent
    }

    /// What the next heartbeats carry (JSON bytes: the version applied, the briefing's outcome).
    pub fn set_state(&self, payload: Vec<u8>) {
        if let Ok(mut s) = self.state.lock() {
            *s = payload;
        }
    }

    /// Ends the attempt or the connection under way (not the wait after a failure). Two rouses
    /// before the link looks are one.
    pub fn rouse(&self) {
        self.rouse.notify_one();
    }

    /// Stops the link: the connection is closed and the link's task ends.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// How long a closing connection may take to say goodbye before it is dropped.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How long after a rouse ended an attempt or a connection the next attempt waits, instead of the
/// backoff's wait: a rouse says where packets go has changed (a resume, a new route), so the link
/// tries again at once; rouses in this moment are taken and dropped, so a dispatcher's burst of
/// events (up, dhcp4-change, reapply) makes one new attempt, not one per event.
const ROUSE_SETTLE: Duration = Duration::from_millis(500);

/// How long an attempt begun after a rouse, and the connection it makes, stand before a further
/// rouse ends them. A rouse says packets go elsewhere now; the attempt after it already goes the
/// new way, so a rouse in this moment is kept (once, however many arrive) and acted on when the
/// moment ends. A storm of rouses (a flapping link's dispatcher, a signal loop) thus ends the link
/// at most once per this moment, and a connection lives long enough between to carry what waits.
const ROUSE_HOLD: Duration = Duration::from_secs(5);

/// A rouse, acted on no sooner than `hold` (when the attempt under way began after a rouse):
/// rouses before then are one, kept as the notifier's single permit until it. Nothing is taken
/// before the hold ends, so a select that drops this future on another branch loses no rouse.
async fn roused(rouse: &Notify, hold: Option<tokio::time::Instant>) {
    if let Some(until) = hold {
        tokio::time::sleep_until(until).await;
    }
    rouse.notified().await;
}

/// Reports waiting for a link, the newest kept when too many pile up.
const PENDING_REPORTS: usize = 16;

/// How long the link waits for another delivery after the first of a session, and after one
/// was superseded: declarations queued while the node was away arrive together (a few at a time,
/// as the prefetch allows), and only the newest of them is applied. The next few come only once
/// the broker has the acknowledgements of the superseded ones, a round trip that took more than
/// 200 ms (the window before) on a loaded 2-core machine, which then applied a middle version
/// and the newest after it.
const GATHER: Duration = Duration::from_secs(1);

/// Deliveries unacknowledged at once (the broker's prefetch for the node's consumer).
const PREFETCH: u16 = 8;

/// Makes a link and its handle; the returned future runs it until [`Handle::stop`].
pub fn link(
    config: Config,
    sink: Arc<dyn Sink>,
) -> (Handle, impl std::future::Future<Output = ()> + Send) {
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = Handle {
        out: out_tx,
        rouse: Arc::new(Notify::new()),
        stop: stop_tx,
        state: Arc::new(std::sync::Mutex::new(b"{}".to_vec())),
    };
    let run = Runner {
        config,
        sink,
        out: out_rx,
        rouse: handle.rouse.clone(),
        stop: stop_rx,
        state: handle.state.clone(),
        pending: VecDeque::new(),
        last: None,
        seq: 0,
    };
    (handle, run.run())
}

/// Runs a link on a thread of its own with a single-threaded runtime (the resident host's way).
pub fn spawn_thread(config: Config, sink: Arc<dyn Sink>) -> std::io::Result<Handle> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (handle, fut) = link(config, sink);
    std::thread::Builder::new()
        .name("link".into())
        .spawn(move || rt.block_on(fut))?;
    Ok(handle)
}

struct Runner {
    config: Config,
    sink: Arc<dyn Sink>,
    out: mpsc::UnboundedReceiver<Out>,
    rouse: Arc<Notify>,
    stop: watch::Receiver<bool>,
    state: Arc<std::sync::Mutex<Vec<u8>>>,
    pending: VecDeque<Vec<u8>>,
    /// The last report, when it could not be published yet.
    last: Option<(Vec<u8>, std::sync::mpsc::Sender<()>)>,
    seq: u64,
}

/// How a linked session ended.
enum Ended {
    Stopped,
    Roused,
    Lost(String),
}

impl Runner {
    async fn run(mut self) {
        let mut backoff = Backoff::new(self.config.backoff_base, self.config.backoff_cap);
        let mut last_contact = self.config.last_contact;
        // Set while the attempt under way began after a rouse: when a further rouse may end it.
        let mut hold: Option<tokio::time::Instant> = None;
        loop {
            if *self.stop.borrow() {
                return;
            }
            let started = Instant::now();
            let rouse = self.rouse.clone();
            let attempt = session::open_with(
                &self.config.broker,
                &self.config.credentials,
                &self.config.resolver,
                self.config.attempt_deadline,
            );
            let opened = tokio::select! {
                r = attempt => r,
                _ = roused(&rouse, hold) => Err(Error::Roused { addr: self.config.broker.addrs.join(", ") }),
                _ = self.stop.changed() => return,
            };
            let mut roused = matches!(opened, Err(Error::Roused { .. }));
            let why = match opened {
                Ok(s) => {
                    backoff.reset();
                    let unlinked_for = last_contact.map(|t| t.elapsed().unwrap_or(Duration::ZERO));
                    tracing::info!(
                        addr = %s.addr,
                        millis = started.elapsed().as_millis() as u64,
                        unlinked = %unlinked_for
                            .map_or("-".into(), |d| crate::human::duration(d.as_secs())),
                        "linked"
                    );
                    self.sink.event(Event::Linked {
                        addr: s.addr.clone(),
                        unlinked_for,
                    });
                    let ended = self.serve(&s, unlinked_for, &mut last_contact, hold).await;
                    last_contact = Some(SystemTime::now());
                    // A connection that went dead (a suspended machine's) would never answer
                    // the close: it gets a moment, then is dropped.
                    let _ = tokio::time::timeout(CLOSE_WAIT, s.close()).await;
                    match ended {
                        Ended::Stopped => return,
                        Ended::Roused => {
                            roused = true;
                            "roused: the connection was ended".to_string()
                        }
                        Ended::Lost(why) => why,
                    }
                }
                Err(e) => e.to_string(),
            };
            // A rouse is not a failure of the broker: the backoff is neither advanced nor reset.
            let wait = if roused { ROUSE_SETTLE } else { backoff.wait() };
            hold = roused.then(|| tokio::time::Instant::now() + wait + ROUSE_HOLD);
            tracing::info!(why = %why, retry_in_ms = wait.as_millis() as u64, "unlinked");
            self.sink.event(Event::Unlinked {
                why,
                retry_in: wait,
            });
            // The wait is not shortened by a rouse: rouses during it are taken and dropped, so
            // they neither cut the wait nor end the next attempt the moment it starts (and a
            // broker that fails keeps its backoff whatever rouses the host).
            let until = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => break,
                    _ = self.rouse.notified() => continue,
                    _ = self.stop.changed() => return,
                }
            }
        }
    }

    /// Serves one linked session until it is lost, roused or stopped.
    async fn serve(
        &mut self,
        s: &Session,
        unlinked_for: Option<Duration>,
        last_contact: &mut Option<SystemTime>,
        hold: Option<tokio::time::Instant>,
    ) -> Ended {
        let rouse = self.rouse.clone();
        let node = self.config.node.clone();
        let queue = names::node_queue(&node);
        let consume =
            tokio::time::timeout(self.config.attempt_deadline, s.consume(&queue, PREFETCH));
        let mut rx = tokio::select! {
            r = consume => match r {
                Ok(Ok(rx)) => rx,
                Ok(Err(e)) => return Ended::Lost(e.to_string()),
                Err(_) => return Ended::Lost("the broker did not answer the consume".into()),
            },
            _ = roused(&rouse, hold) => return Ended::Roused,
            _ = self.stop.changed() => return Ended::Stopped,
        };
        // The first heartbeat says how long the node was unlinked, and the reports that waited
        // go out now.
        if let Err(e) = self.heartbeat(s, unlinked_for).await {
            return Ended::Lost(e.to_string());
        }
        *last_contact = Some(SystemTime::now());
        while let Some(r) = self.pending.pop_front() {
            if let Err(e) = self.send_report(s, &r).await {
                self.pending.push_front(r);
                return Ended::Lost(e.to_string());
            }
        }
        if let Some((r, done)) = self.last.take() {
            return self.send_last(s, r, done).await;
        }
        let mut beat = tokio::time::interval(self.config.heartbeat);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beat.tick().await;
        // The first delivery of a session may be the oldest of a backlog: the others are gathered.
        let mut first = true;
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let Some(m) = m else { return Ended::Lost("the broker closed the node's consumer".into()) };
                    let gather = std::mem::take(&mut first);
                    if let Err(e) = self.deliveries(s, m, &mut rx, gather).await {
                        return e;
                    }
                }
                o = self.out.recv() => match o {
                    Some(Out::Report(r)) => {
                        if let Err(e) = self.send_report(s, &r).await {
                            self.keep(r);
                            return Ended::Lost(e.to_string());
                        }
                    }
                    Some(Out::Last(r, done)) => return self.send_last(s, r, done).await,
                    None => return Ended::Stopped,
                },
                _ = beat.tick() => {
                    if let Err(e) = self.heartbeat(s, None).await {
                        return Ended::Lost(e.to_string());
                    }
                    let now = SystemTime::now();
                    *last_contact = Some(now);
                    self.sink.event(Event::Contact(now));
                }
                failed = s.conn.listen_network_io_failure() => {
                    if failed {
                        return Ended::Lost("the connection to the broker failed".into());
                    }
                    return Ended::Lost("the broker closed the connection".into());
                }
                _ = roused(&rouse, hold) => return Ended::Roused,
                _ = self.stop.changed() => return Ended::Stopped,
            }
        }
    }

    /// The last report published and the sender told, then the session ends as stopped; one
    /// that cannot be published waits for the next session, ahead of nothing.
    async fn send_last(
        &mut self,
        s: &Session,
        r: Vec<u8>,
        done: std::sync::mpsc::Sender<()>,
    ) -> Ended {
        match self.send_report(s, &r).await {
            Ok(()) => {
                let _ = done.send(());
                Ended::Stopped
            }
            Err(e) => {
                self.last = Some((r, done));
                Ended::Lost(e.to_string())
            }
        }
    }

    fn keep(&mut self, r: Vec<u8>) {
        if self.pending.len() >= PENDING_REPORTS {
            self.pending.pop_front();
        }
        self.pending.push_back(r);
    }

    /// A delivery and every one waiting behind it: each verified (a refused one is reported and
    /// acknowledged); of those that verified only the newest is handed to the core and
    /// acknowledged once stored, the older ones acknowledged unapplied and named in it as
    /// superseded. After the first delivery of a session, or once one was superseded, the link
    /// waits [`GATHER`] for more; otherwise it takes only what has already arrived.
    async fn deliveries(
        &mut self,
        s: &Session,
        m: amqprs::channel::ConsumerMessage,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>,
        mut gather: bool,
    ) -> Result<(), Ended> {
        let mut best: Option<(u64, Verified)> = None;
        let mut superseded = Vec::new();
        let mut next = Some(m);
        while let Some(m) = next.take() {
            if let Some((tag, v)) = self.verify(s, m).await? {
                // The older of the two is acknowledged unapplied; the newer is kept.
                let older = match best.take() {
                    Some((btag, b)) if b.version >= v.version => {
                        best = Some((btag, b));
                        Some((tag, v.version))
                    }
                    Some((btag, b)) => {
                        best = Some((tag, v));
                        Some((btag, b.version))
                    }
                    None => {
                        best = Some((tag, v));
                        None
                    }
                };
                if let Some((otag, oversion)) = older {
                    s.ack(otag).await.map_err(|e| Ended::Lost(e.to_string()))?;
                    superseded.push(oversion);
                    gather = true;
                }
            }
            next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(_) if gather => tokio::time::timeout(GATHER, rx.recv()).await.ok().flatten(),
                Err(_) => None,
            };
        }
        let Some((tag, mut v)) = best else {
            return Ok(());
        };
        let version = v.version;
        if !superseded.is_empty() {
            superseded.sort_unstable();
            tracing::info!(version, superseded = %superseded.iter().map(u64::to_string).collect::<Vec<_>>().join(", "), "declarations that waited were superseded by a newer one; only the newest is applied");
        }
        v.superseded = superseded;
        let (tx, rx) = oneshot::channel();
        self.sink.event(Event::Declaration(v, Receipt(Some(tx))));
        // The delivery stays unacknowledged until the core has stored it: a host that dies
        // before then is delivered it again.
        tokio::select! {
            _ = rx => {}
            _ = self.stop.changed() => return Err(Ended::Stopped),
        }
        self.config.last_version = version;
        s.ack(tag).await.map_err(|e| Ended::Lost(e.to_string()))
    }

    /// One delivery verified: its tag and declaration; or refused, reported upward and
    /// acknowledged so it is not delivered again (`None`).
    async fn verify(
        &mut self,
        s: &Session,
        m: amqprs::channel::ConsumerMessage,
    ) -> Result<Option<(u64, Verified)>, Ended> {
        let Some(deliver) = m.deliver else {
            return Ok(None);
        };
        let tag = deliver.delivery_tag();
        let body = m.content.unwrap_or_default();
        let now = crate::token::now_secs();
        match envelope::verify_declaration(
            &body,
            &self.config.controller,
            &self.config.node,
            self.config.last_version,
            now,
        ) {
            Ok(v) => {
                tracing::info!(version = v.version, "declaration verified");
                Ok(Some((tag, v)))
            }
            Err(refusal) => {
                tracing::warn!(kind = refusal.kind(), reason = %refusal, "delivery refused");
                let payload = json!({
                    "node": self.config.node,
                    "at": now,
                    "kind": refusal.kind(),
                    "reason": refusal.to_string(),
                });
                self.sink.event(Event::Refused(refusal));
                if let Err(e) = self
                    .send_up(
                        s,
                        envelope::REFUSAL,
                        &names::refusal_key(&self.config.node),
                        "refusal",
                        &serde_json::to_vec(&payload).expect("json"),
                    )
                    .await
                {
                    return Err(Ended::Lost(e.to_string()));
                }
                s.ack(tag).await.map_err(|e| Ended::Lost(e.to_string()))?;
                Ok(None)
            }
        }
    }

    /// Seals `payload` as `payload_type` with the node's key and publishes it upward under `key`.
    async fn send_up(
        &self,
        s: &Session,
        payload_type: &str,
        key: &str,
        kind: &str,
        payload: &[u8],
    ) -> crate::Result<()> {
        let sealed = envelope::seal(
            &self.config.node_key,
            &self.config.node,
            payload_type,
            payload,
        );
        s.publish(names::REPORTS_EXCHANGE, key, kind, sealed).await
    }

    async fn send_report(&self, s: &Session, payload: &[u8]) -> crate::Result<()> {
        let key = names::report_key(&self.config.node);
        self.send_up(s, envelope::REPORT, &key, "report", payload)
            .await
    }

    async fn heartbeat(
        &mut self,
        s: &Session,
        unlinked_for: Option<Duration>,
    ) -> crate::Result<()> {
        self.seq += 1;
        let state: serde_json::Value = self
            .state
            .lock()
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null);
        let mut payload = json!({
            "node": self.config.node,
            "at": crate::token::now_secs(),
            "seq": self.seq,
            "state": state,
        });
        if self.seq == 1 || unlinked_for.is_some() {
            payload["unlinked_s"] = json!(unlinked_for.map(|d| d.as_secs()));
        }
        let key = names::heartbeat_key(&self.config.node);
        let payload = serde_json::to_vec(&payload).expect("json");
        self.send_up(s, envelope::HEARTBEAT, &key, "heartbeat", &payload)
            .await
    }
}
