//! The core's side of the link: `mesh-host enrol --token` (the node's key made here and kept in
//! the store directory, 0600, never sent anywhere) and, for `mesh-host run`, the link started on a
//! thread of its own, its events handed to the resident host's poll loop through an eventfd, so
//! the loop stays the one place that applies. A declaration from the link is applied with source
//! `link`; the report goes back up; how long the node was unlinked is kept in `link.json` and
//! reported on reconnect.

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
use std::process::ExitCode;
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
}

/// `<store>/link.json`.
pub fn link_file(root: &Path) -> PathBuf {
    store::store_dir(root).join("link.json")
}

/// `<store>/node.key`: the node's Ed25519 seed, base64, mode 0600.
pub fn key_file(root: &Path) -> PathBuf {
    store::store_dir(root).join("node.key")
}

/// Writes `bytes` to `path` created 0600, through a temporary file renamed into place, so a
/// crash leaves the old file or the new one, never half of one. The temporary file is the
/// store's own kind ([`store::write_synced`]: fresh, 0600, never through a planted link), and
/// the directory is synced so the rename survives a power cut.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().context("a private file has a directory")?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    store::write_synced(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
    store::sync_dir(dir).with_context(|| format!("syncing {}", dir.display()))
}

/// Reads the enrolment, if this node is enrolled.
pub fn load(root: &Path) -> Result<Option<Linked>> {
    let path = link_file(root);
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(
            serde_json::from_slice(&b).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn save(root: &Path, l: &Linked) -> Result<()> {
    write_private(
        &link_file(root),
        &serde_json::to_vec_pretty(l).expect("link state serializes"),
    )
}

fn load_key(root: &Path) -> Result<ed25519_dalek::SigningKey> {
    let path = key_file(root);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let seed = STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
        .with_context(|| format!("{}: not a base64 Ed25519 seed", path.display()))?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// `mesh-host enrol --token TOKEN`.
pub fn enrol(host: &Host<'_>, text: &str) -> Result<ExitCode> {
    let token = match link::Token::parse(text, link::now_secs()) {
        Ok(t) => t,
        Err(link::Error::Token(problems)) => {
            for p in &problems {
                eprintln!("error: token: {p}");
            }
            eprintln!("the token was refused; nothing was stored");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.into()),
    };
    // The node's own key is made here and now; it is stored only once the enrolment worked.
    let key = link::generate_key()?;
    let profile = crate::system::profile::Profile::gather(host.root, host.runner);
    let inventory = match crate::inventory::read(host.runner) {
        Ok(v) => v.to_json(),
        Err(e) => serde_json::json!({"unreadable": crate::error::error_text(&e)}),
    };
    let request = link::EnrolRequest {
        token: token.id.clone(),
        node: token.node.clone(),
        public_key: STANDARD.encode(key.verifying_key().as_bytes()),
        profile: serde_json::to_value(&profile)?,
        inventory,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the link's runtime")?;
    let identity = match rt.block_on(link::enrol(&token, &request, ATTEMPT_DEADLINE)) {
        Ok(i) => i,
        Err(e @ (link::Error::Enrolment { .. } | link::Error::Refused { .. })) => {
            eprintln!("error: {e}");
            eprintln!("the token was refused; nothing was stored");
            return Ok(ExitCode::from(2));
        }
        Err(e @ link::Error::Fingerprint { .. }) => {
            eprintln!("error: refused: {e}");
            eprintln!("nothing was stored");
            return Ok(ExitCode::from(3));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("enrolling")),
    };
    let dir = store::store_dir(host.root);
    std::fs::create_dir_all(&dir).with_context(|| format!("store {}", dir.display()))?;
    // A re-enrolment with the same controller keeps the version high-water mark, so declarations
    // the node already applied cannot be replayed to it under its new identity.
    let last_version = match load(host.root) {
        Ok(Some(old)) if old.node == token.node && old.controller == token.controller => {
            old.last_version
        }
        _ => 0,
    };
    write_private(
        &key_file(host.root),
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
    };
    save(host.root, &linked)?;
    println!(
        "enrolled as node {} through broker {} (certificate {}); `mesh-host run` keeps the link",
        linked.node,
        token.brokers.join(", "),
        &token.fingerprint[..16]
    );
    // A resident host already running takes the new identity up at once.
    if crate::pid_file::tell_resident(host.root) {
        tracing::info!("told the resident host that a new enrolment is stored");
    }
    Ok(ExitCode::SUCCESS)
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
}

impl Resident {
    /// Starts the link if this node is enrolled.
    pub fn start(root: &Path, heartbeat: Duration) -> Result<Option<Resident>> {
        let Some(state) = load(root)? else {
            return Ok(None);
        };
        let key = load_key(root)?;
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
                    tracing::info!(broker = %addr, unlinked_s = ?unlinked_for.map(|d| d.as_secs()), "linked to the mesh");
                    heard.reconnected = true;
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
                }
                link::Event::Refused(r) => {
                    tracing::warn!(kind = r.kind(), reason = %r, "refused a delivery from the link; nothing was changed");
                }
                link::Event::Declaration(v, receipt) => {
                    let (restarts, memo) = self.apply(host, &v);
                    heard.applied = true;
                    heard.restarts_host |= restarts;
                    if memo.is_some() {
                        heard.memo = memo;
                    }
                    receipt.done();
                }
            }
        }
        heard
    }

    fn contact(&mut self, root: &Path, at: u64) {
        self.state.last_contact = Some(at);
        if let Err(e) = save(root, &self.state) {
            tracing::warn!(error = %e, "recording the last contact");
        }
    }

    /// Applies one verified declaration and reports it; returns whether the host must restart,
    /// and the apply's firewall memo.
    fn apply(
        &mut self,
        host: &Host<'_>,
        v: &link::Verified,
    ) -> (bool, Option<apply::FirewallMemo>) {
        let text = String::from_utf8_lossy(&v.declaration);
        let mut restarts = false;
        let mut memo = None;
        let report = match declaration::parse(&text, Source::Link) {
            Err(problems) => {
                let list: Vec<String> = problems.0.iter().map(|p| p.to_string()).collect();
                tracing::warn!(version = v.version, problems = ?list, "a declaration from the link was refused; nothing was changed");
                serde_json::json!({"refused": list})
            }
            Ok(decl) => match apply::apply(host, &decl, Source::Link) {
                Ok(report) => {
                    restarts = report.restarts_host();
                    memo = report.memo.clone();
                    tracing::info!(version = v.version, failed = ?report.failed().map(|e| e.id.clone()), "applied a declaration from the link");
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
        let payload = serde_json::json!({
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
        self.handle
            .report(serde_json::to_vec(&payload).expect("json"));
        // The heartbeat from the same reading of the store as the report.
        self.heartbeat_from(state.as_ref());
        (restarts, memo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::unix::fs::PermissionsExt;
    use std::time::SystemTime;

    #[test]
    fn private_files_are_0600_and_replaced_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("link.json");
        write_private(&p, b"one").unwrap();
        write_private(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_node_that_never_enrolled_has_no_link() {
        let d = tempfile::tempdir().unwrap();
        assert!(load(d.path()).unwrap().is_none());
        assert!(Resident::start(d.path(), Duration::from_secs(1))
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_sink_queues_the_event_and_wakes_the_poll_loop() {
        let wakeup = Wakeup::new().expect("an eventfd");
        let (tx, rx) = mpsc::channel();
        let wake = Wake {
            tx: std::sync::Mutex::new(tx),
            wakeup,
        };
        link::Sink::event(&wake, link::Event::Contact(SystemTime::now()));
        let mut pfd = [PollFd::new(wake.wakeup.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut pfd, PollTimeout::ZERO).expect("poll");
        assert_eq!(ready, 1, "the eventfd is readable");
        assert!(matches!(rx.try_recv(), Ok(link::Event::Contact(_))));
    }
}
