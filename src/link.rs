//! The core's side of the link: the enrolment kept (the node's key made by `mesh-host enrol`,
//! `commands/enrol.rs`, kept in the store directory, 0600, never sent anywhere) and, for
//! `mesh-host run`, the link started on a thread of its own, its events handed to the resident
//! host's poll loop through an eventfd, so the loop stays the one place that applies. A
//! declaration from the link is applied with source `link`; the report goes back up; how long the
//! node was unlinked is kept in `link.json` and reported on reconnect.

use crate::apply::{self, Host};
use crate::declaration::{self, Source};
use crate::store;
use crate::wakeup::Wakeup;
use anyhow::{Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, UNIX_EPOCH};

/// The longest one attempt to reach one broker address may take before it is given up.
pub const ATTEMPT_DEADLINE: Duration = Duration::from_secs(30);

/// What the node keeps of its enrolment, beside the store (`link.json`, mode 0600: it holds the
/// broker password).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Linked {
    pub node: String,
    pub broker: link::Broker,
    /// The controller's Ed25519 key, standard base64.
    pub controller: String,
    pub credentials: link::Credentials,
    /// The token this identity came from.
    pub token: String,
    pub enrolled_at: u64,
    /// The newest declaration version accepted: only a newer one is.
    #[serde(default)]
    pub last_version: u64,
    /// When the broker was last heard from (seconds since the epoch).
    #[serde(default)]
    pub last_contact: Option<u64>,
    /// How the resident host's link stands, as it last recorded (`mesh-host link status` reads
    /// it; whether that host still runs is asked of the kernel there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<Connection>,
}

/// The resident host's link as it last changed: up to a broker, or down and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Connection {
    /// Linked to a broker now.
    pub up: bool,
    /// Since when (seconds since the epoch).
    pub since: u64,
    /// The broker's address when up; why it is down otherwise.
    pub detail: String,
}

/// `<store>/link.json`.
pub fn link_file(root: &Path) -> PathBuf {
    store::store_dir(root).join("link.json")
}

/// `<store>/node.key`: the node's Ed25519 seed, base64, mode 0600.
pub fn key_file(root: &Path) -> PathBuf {
    store::store_dir(root).join("node.key")
}

/// Writes `bytes` to the store's file `name` (under `root`) created 0600, through a temporary
/// file renamed into place, so a crash leaves the old file or the new one, never half of one.
/// Both are opened by name in the store's directory handle ([`store::named_dir`]: checked
/// beneath a root other than `/`), the temporary one fresh and never through a planted link, and
/// the directory is synced so the rename survives a power cut.
fn write_private(root: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let shown = store::store_dir(root).join(name);
    let dir = store::named_dir(root, true)?
        .with_context(|| format!("store {}", store::store_dir(root).display()))?;
    let tmp = format!(".{name}.tmp");
    dir.write_synced(&tmp, bytes)
        .with_context(|| format!("writing {}", dir.shown(&tmp).display()))?;
    dir.rename(&tmp, name)
        .with_context(|| format!("renaming into {}", shown.display()))?;
    dir.sync()
        .with_context(|| format!("syncing {}", dir.path().display()))
}

/// Reads the enrolment, if this node is enrolled.
pub fn load(root: &Path) -> Result<Option<Linked>> {
    let path = link_file(root);
    let Some(bytes) = read_private(root, "link.json")? else {
        return Ok(None);
    };
    Ok(Some(
        serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?,
    ))
}

/// The store's file `name` under `root`, read by name in the store's directory handle (no link
/// followed); `None` when the directory or the file is not there.
fn read_private(root: &Path, name: &str) -> Result<Option<Vec<u8>>> {
    let Some(dir) = store::named_dir(root, false)? else {
        return Ok(None);
    };
    dir.read(name)
        .with_context(|| format!("reading {}", dir.shown(name).display()))
}

fn save(root: &Path, l: &Linked) -> Result<()> {
    write_private(
        root,
        "link.json",
        &serde_json::to_vec_pretty(l).expect("link state serializes"),
    )
}

fn load_key(root: &Path) -> Result<ed25519_dalek::SigningKey> {
    let path = key_file(root);
    let bytes = read_private(root, "node.key")?
        .with_context(|| format!("reading {}: not there", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let seed = STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
        .with_context(|| format!("{}: not a base64 Ed25519 seed", path.display()))?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// Keeps an enrolment that worked: the node's key (0600) and `link.json` in the store directory,
/// with the version high-water mark carried over from the identity it replaces or a release
/// left, so declarations the node already applied cannot be replayed to it.
pub fn keep(
    root: &Path,
    key: &ed25519_dalek::SigningKey,
    token: &link::Token,
    identity: &link::Identity,
) -> Result<Linked> {
    let dir = store::store_dir(root);
    std::fs::create_dir_all(&dir).with_context(|| format!("store {}", dir.display()))?;
    // A re-enrolment with the same controller keeps the version high-water mark, so declarations
    // the node already applied cannot be replayed to it under its new identity.
    // So does one after a release, from what the release left of the identity it dropped.
    let last_version = match load(root) {
        Ok(Some(old)) if old.node == token.node && old.controller == token.controller => {
            old.last_version
        }
        Ok(None) => released(root)
            .filter(|r| r.node == token.node && r.controller == token.controller)
            .map_or(0, |r| r.last_version),
        _ => 0,
    };
    write_private(
        root,
        "node.key",
        format!("{}\n", STANDARD.encode(key.to_bytes())).as_bytes(),
    )?;
    let linked = Linked {
        node: identity.node.clone(),
        broker: token.broker(),
        controller: token.controller.clone(),
        credentials: link::Credentials {
            user: identity.user.clone(),
            password: identity.password.clone(),
        },
        token: token.id.clone(),
        enrolled_at: link::now_secs(),
        last_version,
        last_contact: Some(link::now_secs()),
        connection: None,
    };
    save(root, &linked)?;
    Ok(linked)
}

/// What a release keeps of the identity it dropped (`<store>/released.json`): no key and no
/// credentials, only whom it was and the newest version it accepted, so that a re-enrolment as
/// the same node with the same controller is never replayed an older declaration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReleasedIdentity {
    pub node: String,
    pub controller: String,
    pub last_version: u64,
    pub released_at: u64,
}

/// The identity a release dropped, if the last store here was released.
pub fn released(root: &Path) -> Option<ReleasedIdentity> {
    let bytes = std::fs::read(store::store_dir(root).join(store::RELEASED)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Drops the node's identity: its key and the link's state. A release does this last, once its
/// report was sent.
fn forget_identity(root: &Path) -> Result<()> {
    let Some(dir) = store::named_dir(root, false)? else {
        return Ok(());
    };
    for name in ["node.key", "link.json"] {
        dir.remove(name)
            .with_context(|| format!("removing {}", dir.shown(name).display()))?;
    }
    dir.sync()
        .with_context(|| format!("syncing {}", dir.path().display()))
}

/// Whether the enrolment stored differs from the one `running` was started with (a new token
/// was enrolled, or the node was enrolled while the resident host ran unlinked).
pub fn changed(root: &Path, running: Option<&Resident>) -> bool {
    let stored = load(root).ok().flatten().map(|l| l.token);
    stored != running.map(|r| r.state.token.clone())
}

/// The core's side of the seam: events queued for the poll loop, which an eventfd wakes.
struct Wake {
    tx: std::sync::Mutex<mpsc::Sender<link::Event>>,
    wakeup: Wakeup,
}

impl link::Sink for Wake {
    fn event(&self, event: link::Event) {
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(event);
        }
        self.wakeup.ring();
    }
}

/// The resident host's side of a running link.
pub struct Resident {
    pub handle: link::Handle,
    events: mpsc::Receiver<link::Event>,
    wake: Arc<Wake>,
    state: Linked,
}

/// What the poll loop should do after the link's events were handled.
#[derive(Debug, Default)]
pub struct Heard {
    /// Linked again: declarations may have been missed, so reconcile.
    pub reconnected: bool,
    /// A declaration was applied (the resident host's memo is stale).
    pub applied: bool,
    /// The applied declaration installed a new binary of the host.
    pub restarts_host: bool,
    /// The guard and openings the last apply put in force.
    pub memo: Option<apply::FirewallMemo>,
    /// The node was released: its link is stopped, its identity and store are gone, and
    /// whatever the last apply put in force is not the host's to put back any more.
    pub released: bool,
}

/// What one declaration from the link came to.
enum Applied {
    /// Applied (or refused) and reported: whether the host must restart, and the firewall memo.
    Declaration(bool, Option<Box<apply::FirewallMemo>>),
    /// A release carried out: the report still to send, as the link's last.
    Release(Vec<u8>),
}

impl Resident {
    /// Starts the link if this node is enrolled.
    pub fn start(root: &Path, heartbeat: Duration) -> Result<Option<Resident>> {
        let Some(state) = load(root)? else {
            return Ok(None);
        };
        // A host that stopped after carrying out a release and before dropping the identity
        // (enrolled before the release was, and never since) finishes dropping it now.
        if released(root).is_some_and(|r| {
            r.node == state.node
                && r.controller == state.controller
                && state.enrolled_at < r.released_at
        }) {
            forget_identity(root)?;
            tracing::info!(node = %state.node, "this node was released; the identity left behind is dropped; hosted, waiting for `mesh-host enrol`");
            return Ok(None);
        }
        let key = load_key(root)?;
        // What an earlier host recorded of its link is not this one's: not linked yet.
        let mut state = state;
        if state.connection.as_ref().is_none_or(|c| c.up) {
            state.connection = Some(Connection {
                up: false,
                since: link::now_secs(),
                detail: "the resident host started; not linked yet".into(),
            });
            if let Err(e) = save(root, &state) {
                tracing::warn!(error = %e, "recording the link not linked yet");
            }
        }
        let controller = link::controller_key(&state.controller)
            .map_err(|e| anyhow::anyhow!("{}: controller: {e}", link_file(root).display()))?;
        let wakeup = Wakeup::new().context("opening an eventfd")?;
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(Wake {
            tx: std::sync::Mutex::new(tx),
            wakeup,
        });
        let config = link::Config {
            node: state.node.clone(),
            broker: state.broker.clone(),
            resolver: link::Resolver::under(root),
            credentials: state.credentials.clone(),
            controller,
            node_key: key,
            last_version: state.last_version,
            last_contact: state
                .last_contact
                .map(|s| UNIX_EPOCH + Duration::from_secs(s)),
            heartbeat,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            attempt_deadline: ATTEMPT_DEADLINE,
        };
        let handle = link::spawn_thread(config, wake.clone()).context("starting the link")?;
        Ok(Some(Resident {
            handle,
            events: rx,
            wake,
            state,
        }))
    }

    /// The fd the poll loop watches.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.wakeup.as_fd()
    }

    /// Tells the link what the node now runs (the heartbeat's content) from the store.
    pub fn refresh_state(&self, root: &Path) {
        self.heartbeat_from(store::peek(root).ok().flatten().as_ref());
    }

    /// Sets the heartbeat's content from the store as already read.
    fn heartbeat_from(&self, stored: Option<&store::State>) {
        let outcome = stored
            .and_then(|s| s.briefing.as_ref())
            .map(|b| serde_json::to_value(b.outcome()).unwrap_or_default());
        self.handle.set_state(
            serde_json::to_vec(&serde_json::json!({
                "version": self.state.last_version,
                "outcome": outcome,
            }))
            .expect("json"),
        );
    }

    /// Handles every queued event: applies verified declarations with source `link`, reports
    /// them, keeps the version and the last contact.
    pub fn handle_events(&mut self, host: &Host<'_>) -> Heard {
        // The wake-up is spent; the events are what the queue holds, read below.
        self.wake.wakeup.heard();
        let mut heard = Heard::default();
        while let Ok(event) = self.events.try_recv() {
            match event {
                link::Event::Linked { addr, unlinked_for } => {
                    tracing::info!(
                        broker = %addr,
                        unlinked = %unlinked_for.map_or("-".into(), |d| link::human::duration(d.as_secs())),
                        "linked to the mesh"
                    );
                    heard.reconnected = true;
                    self.state.connection = Some(Connection {
                        up: true,
                        since: link::now_secs(),
                        detail: addr,
                    });
                    self.contact(host.root, link::now_secs());
                }
                link::Event::Contact(t) => {
                    self.contact(
                        host.root,
                        t.duration_since(UNIX_EPOCH)
                            .map(|d| d.as_secs())
                            .unwrap_or(0),
                    );
                }
                link::Event::Unlinked { why, retry_in } => {
                    tracing::info!(why = %why, retry_in_ms = retry_in.as_millis() as u64, "unlinked; reconciling against the store meanwhile");
                    self.down(host.root, why);
                }
                link::Event::Refused(r) => {
                    tracing::warn!(kind = r.kind(), reason = %r, "refused a delivery from the link; nothing was changed");
                }
                link::Event::Declaration(v, receipt) => match self.apply(host, &v) {
                    Applied::Declaration(restarts, memo) => {
                        heard.applied = true;
                        heard.restarts_host |= restarts;
                        if let Some(m) = memo {
                            heard.memo = Some(*m);
                        }
                        receipt.done();
                    }
                    Applied::Release(payload) => {
                        // Acknowledged first, so the release is never delivered again (the
                        // link acks it before it reads the report), then the report, the last
                        // thing this link sends, then the identity goes.
                        receipt.done();
                        let sent = self.handle.report_last(payload, ATTEMPT_DEADLINE);
                        if !sent {
                            tracing::warn!(version = v.version, "the release's report could not be sent; the node is released all the same");
                        }
                        match forget_identity(host.root) {
                            Ok(()) => {
                                tracing::info!(version = v.version, node = %self.state.node, report_sent = sent, "released by the controller: what the node owned is removed, its identity is dropped; hosted, waiting for `mesh-host enrol`")
                            }
                            Err(e) => {
                                tracing::error!(error = %crate::error::error_text(&e), "dropping the released identity")
                            }
                        }
                        heard.released = true;
                        // The link is stopped: nothing queued after the release is applied.
                        return heard;
                    }
                },
            }
        }
        heard
    }

    /// Records the link down (once per loss: a failed attempt after it only updates why, in
    /// memory, so a broker away for hours costs no write per attempt).
    fn down(&mut self, root: &Path, why: String) {
        match &mut self.state.connection {
            Some(c) if !c.up => c.detail = why,
            _ => {
                self.state.connection = Some(Connection {
                    up: false,
                    since: link::now_secs(),
                    detail: why,
                });
                if let Err(e) = save(root, &self.state) {
                    tracing::warn!(error = %e, "recording the link down");
                }
            }
        }
    }

    fn contact(&mut self, root: &Path, at: u64) {
        self.state.last_contact = Some(at);
        if let Err(e) = save(root, &self.state) {
            tracing::warn!(error = %e, "recording the last contact");
        }
    }

    /// Applies one verified declaration and reports it; returns whether the host must restart,
    /// and the apply's firewall memo.
    fn apply(&mut self, host: &Host<'_>, v: &link::Verified) -> Applied {
        let text = String::from_utf8_lossy(&v.declaration);
        let mut restarts = false;
        let mut memo = None;
        let mut release = None;
        let report = match declaration::parse(&text, Source::Link) {
            Err(problems) => {
                let list: Vec<String> = problems.0.iter().map(|p| p.to_string()).collect();
                tracing::warn!(version = v.version, problems = %list.join("; "), "a declaration from the link was refused; nothing was changed");
                serde_json::json!({"refused": list})
            }
            Ok(decl) if decl.release => {
                let (report, done) = self.release(host, &decl, v.version);
                release = Some(done);
                report
            }
            Ok(decl) => match apply::apply(host, &decl, Source::Link) {
                Ok(report) => {
                    restarts = report.restarts_host();
                    memo = report.memo.clone();
                    tracing::info!(
                        version = v.version,
                        failed = report.failed().map(|e| e.id.as_str()),
                        "applied a declaration from the link"
                    );
                    serde_json::to_value(&report).unwrap_or_default()
                }
                Err(e) => {
                    tracing::error!(version = v.version, error = %e, "applying a declaration from the link");
                    serde_json::json!({"error": e.to_string()})
                }
            },
        };
        // The version is spent whatever the outcome: the controller sends a newer one to change
        // anything, and the same bytes are never applied twice from the link.
        self.state.last_version = v.version;
        if let Err(e) = save(host.root, &self.state) {
            tracing::error!(error = %e, "recording the declaration's version");
        }
        let state = store::peek(host.root).ok().flatten();
        let mut payload = serde_json::json!({
            "node": self.state.node,
            "version": v.version,
            // Older declarations that waited in the queue with this one and were not applied.
            "superseded": v.superseded,
            "report": report,
            "briefing": state.as_ref().and_then(|s| s.briefing.as_ref()).map(|b| serde_json::to_value(b.shown()).unwrap_or_default()),
            // The mesh keeps this copy for recovery, never as a source.
            "owned": state.as_ref().map(|s| serde_json::to_value(&s.owned).unwrap_or_default()),
            "held": state.as_ref().map(|s| serde_json::to_value(&s.held).unwrap_or_default()),
        });
        if let Some(done) = release {
            payload["release"] = serde_json::json!({"released": done});
            if done {
                // Retired with the store: the released node owns and holds nothing.
                payload["owned"] = serde_json::json!([]);
                payload["held"] = serde_json::json!([]);
                return Applied::Release(serde_json::to_vec(&payload).expect("json"));
            }
        }
        self.handle
            .report(serde_json::to_vec(&payload).expect("json"));
        // The heartbeat from the same reading of the store as the report.
        self.heartbeat_from(state.as_ref());
        Applied::Declaration(restarts, memo.map(Box::new))
    }

    /// Carries out a release: its report (the apply's, with the guard's lines), and whether the
    /// node is released. One that did not complete leaves the node enrolled, said in the report.
    fn release(
        &self,
        host: &Host<'_>,
        decl: &declaration::Declaration,
        version: u64,
    ) -> (serde_json::Value, bool) {
        let marker = ReleasedIdentity {
            node: self.state.node.clone(),
            controller: self.state.controller.clone(),
            last_version: version,
            released_at: link::now_secs(),
        };
        let marker = serde_json::to_vec_pretty(&marker).expect("json");
        match crate::release::carry_out(host, decl, &marker, declaration::Source::Link) {
            Ok(done) => {
                let mut report = serde_json::to_value(&done.report).unwrap_or_default();
                report["guard_removed"] = serde_json::json!(done.guard);
                (report, true)
            }
            Err(e) => {
                let e = anyhow::Error::new(e);
                tracing::error!(version, error = %crate::error::error_text(&e), "a release from the link did not complete; the node stays enrolled");
                let mut report = e
                    .downcast_ref::<crate::release::ReleaseError>()
                    .and_then(|e| e.report())
                    .and_then(|r| serde_json::to_value(r).ok())
                    .unwrap_or_else(|| serde_json::json!({}));
                report["error"] = serde_json::json!(crate::error::error_text(&e));
                (report, false)
            }
        }
    }
}

#[cfg(test)]
mod tests;
