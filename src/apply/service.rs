//! The service applier: a declared service running or stopped, enabled at boot or not, through
//! this build's service manager.
//!
//! A service the manager does not know is *not installed*, and that is a failure whatever state
//! was declared: absence is never reported as success. The host never installs or deletes a unit
//! file (packages do), so an undeclared service is stopped and left installed. On an adopted node
//! a service found running with no record serves something, so until its module is taken it is
//! kept as it is and reported held, like a found file.

use super::adopt::{self, Found, Kept, Records};
use super::{Cx, Done, Outcome, ResourceError};
use crate::declaration::{Declaration, ServiceSpec, ServiceState, Shape};
use crate::store::{self, Owned, State};
use crate::system::{self, ServiceManager, ServiceStatus};
use run::Runner;

/// How a service stands, as compared and stored: `service running enabled`.
pub(super) fn fingerprint(running: bool, enabled: bool) -> String {
    format!(
        "service {} {}",
        if running { "running" } else { "stopped" },
        if enabled { "enabled" } else { "disabled" }
    )
}

pub(super) fn now(st: &ServiceStatus) -> String {
    fingerprint(st.running, st.enabled)
}

pub(super) fn words(print: &str) -> &str {
    print.strip_prefix("service ").unwrap_or(print)
}

pub(super) fn status(sm: &dyn ServiceManager, name: &str) -> Result<ServiceStatus, ResourceError> {
    sm.status(name).map_err(ResourceError::system(format!(
        "reading service {name} through {}",
        sm.name()
    )))
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &ServiceSpec) -> Result<Done, ResourceError> {
    let sm = system::service_manager(cx.runner).map_err(ResourceError::Unavailable)?;
    apply_with(cx, sm.as_ref(), spec)
}

/// What the service applier reads before it decides: the service's status and the store's
/// records of its name.
pub(super) struct Reading {
    pub status: ServiceStatus,
    pub records: Records,
}

/// Reads what [`decide`] needs of `spec` through `sm` and the store's `state`; changes nothing.
pub(super) fn read(
    sm: &dyn ServiceManager,
    state: &State,
    decl: &Declaration,
    spec: &ServiceSpec,
) -> Result<Reading, ResourceError> {
    let keep = adopt::keeps_found(decl, spec.module.as_deref());
    Ok(Reading {
        status: status(sm, &spec.name)?,
        records: Records::of(state, Shape::Service, &spec.id, &spec.name, keep),
    })
}

/// What the service applier does, decided from its [`Reading`] alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// The manager does not know it: a failure whatever was declared (`detail`, its answer).
    NotInstalled { detail: String },
    /// Found running (or held) on an adopted node with no record: kept as it is (`now`, its
    /// fingerprint).
    Keep { kept: Kept, now: String },
    /// It stands as declared: `record` written again only if it differs from `was`.
    Unchanged { record: Owned, was: Option<Owned> },
    /// It stands otherwise (`from`): started or stopped, enabled or disabled, then recorded.
    Change { record: Owned, from: ServiceStatus },
}

/// The service applier's decision: pure, from what was read and what is declared.
pub(super) fn decide(r: &Reading, spec: &ServiceSpec) -> Decision {
    let st = &r.status;
    if !st.installed {
        return Decision::NotInstalled {
            detail: st.detail.clone(),
        };
    }
    let want = fingerprint(spec.state == ServiceState::Running, spec.enabled);
    let cur = now(st);
    let owned = &r.records.owned;
    if owned.is_none() {
        // A service found stopped serves nothing, so only a running one (or one already held)
        // is something found to keep.
        let seen = (r.records.held.is_some() || st.running).then_some(cur.as_str());
        if let Some(kept) = r.records.kept(seen) {
            return Decision::Keep { kept, now: cur };
        }
    }
    let record = Owned {
        parents: Vec::new(),
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Service,
        key: spec.name.clone(),
        digest: Some(store::digest(want.as_bytes())),
        // Taken over when it was already running at the host's first sight of it.
        found: owned.as_ref().map_or(st.running, |o| o.found),
        stamp: None,
    };
    if cur == want {
        Decision::Unchanged {
            record,
            was: owned.clone(),
        }
    } else {
        Decision::Change {
            record,
            from: st.clone(),
        }
    }
}

impl Decision {
    /// The outcome the act reports for this decision.
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::NotInstalled { .. } => Outcome::Failed,
            Decision::Keep { kept, .. } => kept.outcome(),
            Decision::Unchanged { .. } => Outcome::Unchanged,
            Decision::Change { .. } => Outcome::Changed,
        }
    }

    /// The preview's line for this decision: what the act would do.
    pub fn preview(&self, spec: &ServiceSpec) -> String {
        let want = fingerprint(spec.state == ServiceState::Running, spec.enabled);
        match self {
            Decision::NotInstalled { detail } => format!(
                "service {} is not installed ({detail}); the act would fail here",
                spec.name
            ),
            Decision::Keep { now, .. } => format!("found {}; would be kept as it is", words(now)),
            Decision::Unchanged { .. } => format!("{}, as declared", words(&want)),
            Decision::Change { from, .. } => {
                format!("is {}; would be made {}", words(&now(from)), words(&want))
            }
        }
    }
}

pub(super) fn apply_with(
    cx: &mut Cx<'_>,
    sm: &dyn ServiceManager,
    spec: &ServiceSpec,
) -> Result<Done, ResourceError> {
    let r = read(sm, &cx.store.state, cx.decl, spec)?;
    execute(cx, sm, spec, decide(&r, spec))
}

/// Carries out a [`Decision`]: starts, stops, enables or disables and reads back, records, or
/// keeps.
pub(super) fn execute(
    cx: &mut Cx<'_>,
    sm: &dyn ServiceManager,
    spec: &ServiceSpec,
    decision: Decision,
) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let name = spec.name.as_str();
    let want_running = spec.state == ServiceState::Running;
    let want = fingerprint(want_running, spec.enabled);
    let (record, st) = match decision {
        Decision::NotInstalled { detail } => {
            return Err(ResourceError::Refused(format!(
                "service {name} is not installed ({detail}); the host installs no unit files, \
                 and a missing service is never reported as {}",
                words(&want)
            )))
        }
        Decision::Keep { kept, now: cur } => {
            let found = Found {
                id,
                module: spec.module.as_deref(),
                shape: Shape::Service,
                key: name,
                now: Some(cur.clone()),
                stamp: None,
            };
            adopt::settle(cx, &found, &kept)?;
            return Ok(kept.done(|k| match k {
                Kept::Changed { was } => format!(
                    "held service was {} when found and is {} now, changed by something else; \
                     not reverted",
                    words(was),
                    words(&cur)
                ),
                Kept::Gone | Kept::Held => format!("found {}; kept as it is", words(&cur)),
            }));
        }
        Decision::Unchanged { record, was } => {
            cx.refresh_owned(record, was.as_ref())?;
            return Ok(Done::new(
                Outcome::Unchanged,
                format!("{}, as declared", words(&want)),
            ));
        }
        Decision::Change { record, from } => (record, from),
    };
    let cur = now(&st);
    cx.intend(&record)?;
    let mut did = Vec::new();
    let verb = |r: Result<(), system::Error>, what: &str| {
        r.map_err(ResourceError::system(format!(
            "{what} service {name} through {}",
            sm.name()
        )))
    };
    if want_running && !st.running {
        verb(sm.start(name), "starting")?;
        did.push("started");
    }
    if !want_running && st.running {
        verb(sm.stop(name), "stopping")?;
        did.push("stopped");
    }
    if spec.enabled && !st.enabled {
        verb(sm.enable(name), "enabling")?;
        did.push("enabled");
    }
    if !spec.enabled && st.enabled {
        verb(sm.disable(name), "disabling")?;
        did.push("disabled");
    }
    cx.changed(id);
    let back = status(sm, name)?;
    if now(&back) != want {
        return Err(ResourceError::NotAsDeclared(format!(
            "service {name} was {} without an error, but reads back {} ({}), not {}",
            did.join(" and "),
            words(&now(&back)),
            back.detail,
            words(&want)
        )));
    }
    cx.record_owned(record)?;
    Ok(Done::new(
        Outcome::Changed,
        format!("was {}; {}", words(&cur), did.join(", ")),
    ))
}

/// Stops an undeclared service and leaves it installed: its unit file is the package's, never the
/// host's to delete.
pub(super) fn remove(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    let sm = system::service_manager(cx.runner).map_err(ResourceError::Unavailable)?;
    remove_with(cx, sm.as_ref(), rec)
}

pub(super) fn remove_with(
    cx: &mut Cx<'_>,
    sm: &dyn ServiceManager,
    rec: &Owned,
) -> Result<Done, ResourceError> {
    let name = rec.key.as_str();
    if rec.found {
        // The host took this service over as it found it, running; it did not start it, so it
        // does not stop it: what serves keeps serving.
        return Ok(Done::new(
            Outcome::Forgotten,
            "found and taken over, not started by the host: left as it is",
        ));
    }
    let st = status(sm, name)?;
    if !st.installed {
        return Ok(Done::new(
            Outcome::Forgotten,
            "no longer installed; nothing to stop",
        ));
    }
    if !st.running {
        return Ok(Done::new(
            Outcome::Forgotten,
            "already stopped; left installed: its unit file is not the host's to delete",
        ));
    }
    sm.stop(name).map_err(ResourceError::system(format!(
        "stopping service {name} through {}",
        sm.name()
    )))?;
    cx.changed(&rec.id);
    let back = status(sm, name)?;
    if back.running {
        return Err(ResourceError::NotAsDeclared(format!(
            "service {name} was stopped without an error, but is still running ({})",
            back.detail
        )));
    }
    Ok(Done::new(
        Outcome::Forgotten,
        "stopped; left installed: its unit file is not the host's to delete",
    ))
}

/// Whether an intent left by a host that died mid-apply was carried out: the service stands as
/// the record says the host was making it stand.
pub(super) fn settled(runner: &dyn Runner, rec: &Owned) -> bool {
    let Ok(sm) = system::service_manager(runner) else {
        return false;
    };
    matches!(
        sm.status(&rec.key),
        Ok(st) if st.installed
            && rec.digest.as_deref() == Some(store::digest(now(&st).as_bytes()).as_str())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::{Declaration, Resource};
    use crate::system::fake::{declaration, Bed, FakeServices};
    use serde_json::{json, Value};

    fn svc(state: &str, enabled: bool) -> Value {
        json!({"id": "app/svc", "module": "app", "type": "service", "name": "nginx",
               "state": state, "enabled": enabled})
    }

    fn apply(bed: &mut Bed, sm: &FakeServices, d: &Declaration) -> Result<Done, ResourceError> {
        let Resource::Service(s) = &d.resources[0] else {
            panic!("not a service")
        };
        apply_with(&mut bed.cx(d), sm, s)
    }

    fn outcome(r: Result<Done, impl std::fmt::Display>) -> (Outcome, String) {
        let d = r.unwrap_or_else(|e| panic!("failed: {e}"));
        (d.outcome, d.detail)
    }

    #[test]
    fn a_service_that_is_not_installed_fails_whatever_was_asked() {
        let (mut bed, sm) = (Bed::new(), FakeServices::default());
        for state in ["running", "stopped"] {
            let d = declaration("converged", &[], json!([svc(state, false)]));
            let e = apply(&mut bed, &sm, &d)
                .err()
                .expect("a missing service fails");
            assert!(matches!(e, ResourceError::Refused(_)), "{e:?}");
            let e = e.to_string();
            assert!(e.contains("nginx is not installed"), "{e}");
        }
        assert!(sm.calls.borrow().is_empty());
        assert!(bed.store.state.owned.is_empty());
    }

    #[test]
    fn started_and_enabled_then_unchanged_then_stopped_when_undeclared() {
        let (mut bed, sm) = (Bed::new(), FakeServices::default());
        sm.unit("nginx", false, false);
        let d = declaration("converged", &[], json!([svc("running", true)]));
        let (o, detail) = outcome(apply(&mut bed, &sm, &d));
        assert_eq!(o, Outcome::Changed);
        assert_eq!(detail, "was stopped disabled; started, enabled");
        assert_eq!(*sm.calls.borrow(), ["start nginx", "enable nginx"]);
        let rec = bed.store.state.owned("app/svc").cloned().unwrap();
        assert!(!rec.found, "it was not running when the host first saw it");

        sm.calls.borrow_mut().clear();
        assert_eq!(outcome(apply(&mut bed, &sm, &d)).0, Outcome::Unchanged);
        assert!(sm.calls.borrow().is_empty());

        let empty = declaration("converged", &[], json!([]));
        let (o, detail) = outcome(remove_with(&mut bed.cx(&empty), &sm, &rec));
        assert_eq!(o, Outcome::Forgotten);
        assert!(detail.starts_with("stopped; left installed"), "{detail}");
        let now = sm.get("nginx").unwrap();
        assert!(now.installed && !now.running, "stopped, never deleted");
        assert_eq!(*sm.calls.borrow(), ["stop nginx"]);
    }

    #[test]
    fn a_running_service_the_host_took_over_is_not_stopped_when_undeclared() {
        let (mut bed, sm) = (Bed::new(), FakeServices::default());
        sm.unit("nginx", true, true);
        let d = declaration("converged", &[], json!([svc("running", true)]));
        assert_eq!(outcome(apply(&mut bed, &sm, &d)).0, Outcome::Unchanged);
        let rec = bed.store.state.owned("app/svc").cloned().unwrap();
        assert!(rec.found, "it was running when the host first saw it");
        let empty = declaration("converged", &[], json!([]));
        let (o, detail) = outcome(remove_with(&mut bed.cx(&empty), &sm, &rec));
        assert_eq!(o, Outcome::Forgotten, "{detail}");
        assert!(
            sm.get("nginx").unwrap().running,
            "what serves keeps serving"
        );
        assert!(
            !sm.calls.borrow().iter().any(|c| c.starts_with("stop")),
            "{:?}",
            sm.calls.borrow()
        );
    }

    #[test]
    fn a_start_that_starts_nothing_is_a_failure() {
        let (mut bed, sm) = (Bed::new(), FakeServices::default());
        sm.unit("nginx", false, true);
        sm.inert.set(true);
        let d = declaration("converged", &[], json!([svc("running", true)]));
        let e = apply(&mut bed, &sm, &d).err().expect("fails").to_string();
        assert!(
            e.contains("was started without an error, but reads back stopped enabled"),
            "{e}"
        );
        assert!(bed.store.state.owned("app/svc").is_none());
    }

    #[test]
    fn found_running_on_an_adopted_node_is_held_and_a_stop_is_reported_not_reverted() {
        let (mut bed, sm) = (Bed::new(), FakeServices::default());
        sm.unit("nginx", true, true);
        // Declared stopped: converging would stop what serves, so it is held instead.
        let d = declaration("adopted", &[], json!([svc("stopped", false)]));
        let (o, detail) = outcome(apply(&mut bed, &sm, &d));
        assert_eq!(o, Outcome::Held);
        assert_eq!(detail, "found running enabled; kept as it is");
        assert!(sm.calls.borrow().is_empty());

        sm.units.borrow_mut().get_mut("nginx").unwrap().running = false;
        let (o, detail) = outcome(apply(&mut bed, &sm, &d));
        assert_eq!(o, Outcome::ChangedBySomethingElse);
        assert!(detail.contains("running enabled when found"), "{detail}");
        assert!(sm.calls.borrow().is_empty(), "nothing reverted");

        // Taking the module converges it, and it is recorded as taken over.
        let taken = declaration("adopted", &["app"], json!([svc("stopped", false)]));
        let (o, _) = outcome(apply(&mut bed, &sm, &taken));
        assert_eq!(o, Outcome::Changed);
        assert_eq!(*sm.calls.borrow(), ["disable nginx"]);
        assert!(bed.store.state.held("app/svc").is_none());
        assert!(bed.store.state.owned("app/svc").is_some());
    }

    /// Stands in for OpenRC's `rc-service`: a service exists when `$STUB/init.d/NAME` does, is
    /// started when `$STUB/started/NAME` does (`status` exits 0, else 3 as OpenRC's does).
    const RC_SERVICE: &str = r#"#!/bin/bash
set -eu
echo "rc-service $*" >> "$STUB/calls"
if [ "$1" = --exists ]; then [ -f "$STUB/init.d/$2" ]; exit $?; fi
name=$1 verb=$2
[ -f "$STUB/init.d/$name" ] || { echo " * rc-service: service '$name' does not exist" >&2; exit 1; }
case "$verb" in
  status) if [ -f "$STUB/started/$name" ]; then echo " * status: started"; exit 0; fi
          echo " * status: stopped"; exit 3 ;;
  start) mkdir -p "$STUB/started"; touch "$STUB/started/$name" ;;
  stop) rm -f "$STUB/started/$name" ;;
esac
"#;

    /// Stands in for OpenRC's `rc-update`: a service is in runlevel L when
    /// `$STUB/runlevels/L/NAME` exists; `show` lists `NAME | L…` for every service in one.
    const RC_UPDATE: &str = r#"#!/bin/bash
set -eu
echo "rc-update $*" >> "$STUB/calls"
case "$1" in
  show)
    for svc in $(ls "$STUB/runlevels"/*/ 2>/dev/null | grep -v : | sort -u); do
      levels=$(for d in "$STUB/runlevels"/*/; do [ -f "$d$svc" ] && basename "$d"; done | tr '\n' ' ')
      printf '%20s | %s\n' "$svc" "$levels"
    done ;;
  add) mkdir -p "$STUB/runlevels/$3"; touch "$STUB/runlevels/$3/$2" ;;
  del) rm "$STUB/runlevels/$3/$2" ;;
esac
"#;

    #[test]
    fn openrc_through_stub_programs_not_installed_started_enabled_and_stopped() {
        use crate::system::fake::StubRunner;
        use crate::system::openrc::OpenRc;
        let stub = StubRunner::new();
        stub.program("rc-service", RC_SERVICE);
        stub.program("rc-update", RC_UPDATE);
        let sm = OpenRc::new(&stub);
        let mut bed = Bed::new();
        let d = declaration("converged", &[], json!([svc("running", true)]));
        let Resource::Service(spec) = &d.resources[0] else {
            panic!()
        };

        let e = apply_with(&mut bed.cx(&d), &sm, spec)
            .err()
            .expect("no init script")
            .to_string();
        assert!(e.contains("nginx is not installed"), "{e}");
        assert_eq!(stub.calls(), ["rc-service --exists nginx"]);

        stub.file("init.d/nginx", "#!/sbin/openrc-run\n");
        stub.file("runlevels/boot/sshd", "");
        let (o, detail) = outcome(apply_with(&mut bed.cx(&d), &sm, spec));
        assert_eq!(o, Outcome::Changed);
        assert_eq!(detail, "was stopped disabled; started, enabled");
        assert!(stub.exists("started/nginx") && stub.exists("runlevels/default/nginx"));
        let calls = stub.calls();
        assert!(
            calls.contains(&"rc-service nginx start".to_string()),
            "{calls:?}"
        );
        assert!(
            calls.contains(&"rc-update add nginx default".to_string()),
            "{calls:?}"
        );
        assert_eq!(
            outcome(apply_with(&mut bed.cx(&d), &sm, spec)).0,
            Outcome::Unchanged
        );

        let disabled = declaration("converged", &[], json!([svc("running", false)]));
        let Resource::Service(spec) = &disabled.resources[0] else {
            panic!()
        };
        assert_eq!(
            outcome(apply_with(&mut bed.cx(&disabled), &sm, spec)).0,
            Outcome::Changed
        );
        assert!(!stub.exists("runlevels/default/nginx"));
        assert!(
            stub.exists("runlevels/boot/sshd"),
            "other services untouched"
        );

        let rec = bed.store.state.owned("app/svc").cloned().unwrap();
        let empty = declaration("converged", &[], json!([]));
        assert_eq!(
            outcome(remove_with(&mut bed.cx(&empty), &sm, &rec)).0,
            Outcome::Forgotten
        );
        assert!(!stub.exists("started/nginx"));
        assert!(stub.exists("init.d/nginx"), "never deleted");
    }

    #[test]
    fn a_stopped_service_on_an_adopted_node_is_not_found_and_converges() {
        let (mut bed, sm) = (Bed::new(), FakeServices::default());
        sm.unit("nginx", false, false);
        let d = declaration("adopted", &[], json!([svc("running", true)]));
        assert_eq!(outcome(apply(&mut bed, &sm, &d)).0, Outcome::Changed);
        assert!(sm.get("nginx").unwrap().running);
    }
}
