//! A release (graceful retirement, seed 000 "enrolled → hosted"): the controller's last
//! declaration to a node names nothing and says so (`"release": true`). The host removes what it
//! owns by the asymmetry through the one apply (applied as adopted: held things and the found
//! firewall are left as they are, a flipped node gets its found firewall back), takes away both
//! layers of the guard (the table `inet mesh_host`, with the node's claim, and the BPF layer),
//! and retires its store. `link` then sends the report as the last thing it sends and drops the
//! node's identity, and the resident host runs on, hosted.

use crate::apply::{self, ApplyError, Host, Report};
use crate::declaration::{Declaration, Mode, Source};
use crate::node_firewall;
use crate::store::{self, Store, StoreError};
use std::path::PathBuf;

/// Why a release did not complete; the node then stays enrolled, so the controller can send it
/// again.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The apply that removes what the node owns did not run.
    #[error("releasing node {node}: {source}")]
    Apply {
        node: String,
        #[source]
        source: Box<ApplyError>,
    },
    /// Something the node owns could not be removed; the report names it.
    #[error("releasing node {node}: {id} could not be removed ({why}); the node stays enrolled")]
    Removal {
        node: String,
        id: String,
        why: String,
        report: Box<Report>,
    },
    /// One layer of the guard could not be taken away.
    #[error(
        "releasing node {node}: removing the guard's {layer}: {source}; the node stays enrolled"
    )]
    Guard {
        node: String,
        layer: &'static str,
        #[source]
        source: Box<node_firewall::Error>,
        report: Box<Report>,
    },
    /// The store could not be retired.
    #[error("releasing node {node}: retiring the store at {}: {source}", path.display())]
    Store {
        node: String,
        path: PathBuf,
        #[source]
        source: Box<StoreError>,
        report: Box<Report>,
    },
}

impl ReleaseError {
    /// The apply's report, when the apply ran.
    pub fn report(&self) -> Option<&Report> {
        match self {
            ReleaseError::Apply { .. } => None,
            ReleaseError::Removal { report, .. }
            | ReleaseError::Guard { report, .. }
            | ReleaseError::Store { report, .. } => Some(report),
        }
    }
}

/// What a release did.
#[derive(Debug)]
pub struct Released {
    /// The apply that removed what the node owned.
    pub report: Report,
    /// How each layer of the guard was taken away, one line each.
    pub guard: Vec<String>,
}

/// Carries out a verified release `decl`: everything the node owns removed by the asymmetry,
/// the guard's two layers removed, then `marker` (what the link keeps of a released identity)
/// written as [`store::RELEASED`] and the store retired under its lock.
pub fn carry_out(
    host: &Host<'_>,
    decl: &Declaration,
    marker: &[u8],
    source: Source,
) -> Result<Released, ReleaseError> {
    debug_assert!(decl.release && decl.resources.is_empty());
    let node = decl.node.clone();
    // Applied as adopted whatever its mode: found things are left as they are, and a flipped
    // node's found firewall is put back by the return, as `mesh-host adopt` would.
    let mut adopted = decl.clone();
    adopted.mode = Mode::Adopted;
    adopted.taken.clear();
    let mut report =
        apply::apply(host, &adopted, source).map_err(|source| ReleaseError::Apply {
            node: node.clone(),
            source: Box::new(source),
        })?;
    if let Some(e) = report.failed() {
        return Err(ReleaseError::Removal {
            node,
            id: e.id.clone(),
            why: e.detail.clone(),
            report: Box::new(report),
        });
    }
    let mut fw = (host.firewall)(host.root, &adopted);
    let mut guard = Vec::new();
    match fw.remove_guard_bpf() {
        Ok(true) => guard.push("guard: netfilter BPF layer detached and unpinned".to_string()),
        Ok(false) => guard.push("guard: no netfilter BPF layer was pinned".to_string()),
        Err(source) => {
            return Err(ReleaseError::Guard {
                node,
                layer: "netfilter BPF layer",
                source: Box::new(source),
                report: Box::new(report),
            })
        }
    }
    // The pins' directory the guard made goes too (the bpffs itself is the system's): left
    // empty it would say a host was here.
    let pins = node_firewall::bpf::Pins::under(host.root);
    match std::fs::remove_dir(&pins.dir) {
        Ok(()) => guard.push(format!(
            "guard: pin directory {} removed",
            pins.dir.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => guard.push(format!(
            "guard: pin directory {} left: {e}",
            pins.dir.display()
        )),
    }
    match fw.remove_guard_table() {
        Ok(true) => guard.push(format!(
            "guard: table inet {} removed (with the node's claim)",
            node_firewall::MESH_TABLE
        )),
        Ok(false) => guard.push(format!(
            "guard: no table inet {} was there",
            node_firewall::MESH_TABLE
        )),
        Err(source) => {
            return Err(ReleaseError::Guard {
                node,
                layer: "table",
                source: Box::new(source),
                report: Box::new(report),
            })
        }
    }
    drop(fw);
    // The apply's guard line says how the guard stood before the release took it away: the
    // lines above replace it, so the report never says "refusing …" of a guard that is gone.
    report.guard = None;
    let dir = store::store_dir(host.root);
    let retired = (|| {
        let store = Store::open(host.root)?;
        let path = dir.join(store::RELEASED);
        let tmp = dir.join(format!(".{}.tmp", store::RELEASED));
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        store::write_synced(&tmp, marker).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        store.retire()
    })();
    if let Err(source) = retired {
        return Err(ReleaseError::Store {
            node,
            path: dir,
            source: Box::new(source),
            report: Box::new(report),
        });
    }
    Ok(Released { report, guard })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::validate_value;
    use crate::node_firewall::fake::Recording;
    use crate::node_firewall::NodeFirewall;
    use run::RecordingRunner;
    use serde_json::json;
    use std::path::Path;

    /// A runner that records and a way to open `fake` for every apply.
    fn through(
        fake: &Recording,
    ) -> (
        RecordingRunner,
        impl Fn(&Path, &Declaration) -> Box<dyn NodeFirewall>,
    ) {
        let handed = fake.clone();
        (
            RecordingRunner::default(),
            move |_: &Path, _: &Declaration| Box::new(handed.clone()) as Box<dyn NodeFirewall>,
        )
    }

    fn settings() -> serde_json::Value {
        json!({"ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                         "registry": 5000, "hub": 51820}})
    }

    #[test]
    fn a_release_removes_what_the_node_made_then_both_guard_layers_then_retires_the_store() {
        let root = tempfile::tempdir().unwrap();
        let fake = Recording::watching(&[]);
        let (runner, open) = through(&fake);
        let host = Host {
            root: root.path(),
            runner: &runner,
            firewall: &open,
            confirm: false,
        };
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/found.conf"), "found\n").unwrap();
        let declared = validate_value(
            &json!({"version": 1, "node": "n1", "mode": "adopted", "settings": settings(),
                    "resources": [
                {"id": "made", "type": "file", "path": "/etc/made.conf", "content": "x\n"},
                {"id": "app/found", "module": "app", "type": "file", "path": "/etc/found.conf",
                 "content": "the mesh's\n"}
            ]}),
            Source::Link,
        )
        .unwrap();
        let first = apply::apply(&host, &declared, Source::Link).unwrap();
        assert!(first.failed().is_none(), "{}", first.render());
        assert!(root.path().join("etc/made.conf").exists());

        let release = validate_value(
            &json!({"version": 1, "node": "n1", "mode": "converged", "taken": [],
                    "resources": [], "release": true}),
            Source::Link,
        )
        .unwrap();
        let done = carry_out(&host, &release, b"{\"node\": \"n1\"}\n", Source::Link).unwrap();
        assert!(done.report.failed().is_none(), "{}", done.report.render());
        assert!(
            !root.path().join("etc/made.conf").exists(),
            "what it made is gone"
        );
        assert_eq!(
            std::fs::read_to_string(root.path().join("etc/found.conf")).unwrap(),
            "found\n",
            "what it held is left as it is"
        );
        let methods = fake.methods();
        assert_eq!(
            &methods[methods.len() - 2..],
            ["remove_guard_bpf", "remove_guard_table"],
            "both layers of the guard go last: {methods:?}"
        );
        assert_eq!(done.guard.len(), 2, "{:?}", done.guard);
        let dir = store::store_dir(root.path());
        assert!(
            store::peek(root.path()).unwrap().is_none(),
            "nothing to reconcile"
        );
        assert_eq!(
            std::fs::read(dir.join(store::RELEASED)).unwrap(),
            b"{\"node\": \"n1\"}\n"
        );
    }

    #[test]
    fn a_release_of_a_flipped_node_puts_its_found_firewall_back_first() {
        let root = tempfile::tempdir().unwrap();
        let fake = Recording::watching(&[]);
        let (runner, open) = through(&fake);
        let host = Host {
            root: root.path(),
            runner: &runner,
            firewall: &open,
            confirm: false,
        };
        let declared = |mode: &str| {
            validate_value(
                &json!({"version": 1, "node": "n1", "mode": mode, "settings": settings(),
                        "resources": [{"id": "web/http", "type": "opening", "port": 80,
                                       "proto": "tcp", "from": "anywhere", "path": "incoming"}]}),
                Source::Link,
            )
            .unwrap()
        };
        for mode in ["adopted", "converged"] {
            let r = apply::apply(&host, &declared(mode), Source::Link).unwrap();
            assert!(r.failed().is_none(), "{}", r.render());
        }
        assert!(
            store::peek(root.path()).unwrap().unwrap().flip.is_some(),
            "flipped"
        );
        let release = validate_value(
            &json!({"version": 1, "node": "n1", "mode": "converged", "taken": [],
                    "resources": [], "release": true}),
            Source::Link,
        )
        .unwrap();
        let done = carry_out(&host, &release, b"{}", Source::Link).unwrap();
        assert!(done.report.failed().is_none(), "{}", done.report.render());
        let methods = fake.methods();
        let unflip = methods.iter().rposition(|m| *m == "unflip");
        let removed = methods.iter().position(|m| *m == "remove_guard_table");
        assert!(
            unflip.is_some() && unflip < removed,
            "the return, then the guard goes: {methods:?}"
        );
        assert!(store::peek(root.path()).unwrap().is_none());
    }
}
