//! Each applier's `decide` against the recording fakes, one test per decision: the machine and
//! the store set up, the applier's reading taken, the decision checked, and nothing changed by
//! deciding (no verb asked of a fake, no file written, no record made).

use super::adopt::Kept;
use super::{action, container, directory, file, package, service, Outcome};
use crate::declaration::{Declaration, Resource, Shape};
use crate::store::{Held, Owned};
use crate::system::fake::{declaration, Bed, FakePackages, FakeRuntime, FakeServices};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

fn owned(id: &str, shape: Shape, key: &str, digest: Option<String>) -> Owned {
    Owned {
        parents: Vec::new(),
        id: id.into(),
        module: Some("app".into()),
        shape,
        key: key.into(),
        digest,
        found: false,
        stamp: None,
    }
}

fn held(id: &str, shape: Shape, key: &str, digest: &str) -> Held {
    Held {
        id: id.into(),
        module: Some("app".into()),
        shape,
        key: key.into(),
        digest: Some(digest.into()),
        stamp: None,
    }
}

/// The store's records as a decision leaves them: it must leave them exactly so.
fn records(bed: &Bed) -> (Vec<Owned>, Vec<Held>) {
    (
        bed.store.state.owned.iter().cloned().collect(),
        bed.store.state.held.iter().cloned().collect(),
    )
}

// The package applier.

fn pkg(name: &str, version: Option<&str>) -> Value {
    let mut v = json!({"id": "app/p", "module": "app", "type": "package", "name": name});
    if let Some(version) = version {
        v["version"] = json!(version);
    }
    v
}

/// The package decision for `d`'s one package, checked to ask nothing of the fake.
fn package_decision(bed: &Bed, pm: &FakePackages, d: &Declaration) -> package::Decision {
    let Resource::Package(spec) = &d.resources[0] else {
        panic!("not a package")
    };
    let before = records(bed);
    let r = package::read(pm, &bed.store.state, d, spec).unwrap();
    let decision = package::decide(&r, spec);
    assert!(pm.calls.borrow().is_empty(), "deciding installs nothing");
    assert_eq!(records(bed), before, "deciding records nothing");
    decision
}

#[test]
fn package_decisions_each_from_what_is_installed_and_recorded() {
    let conv = |v: Option<&str>| declaration("converged", &[], json!([pkg("sl", v)]));
    let adopted = declaration("adopted", &[], json!([pkg("sl", None)]));
    let (mut bed, pm) = (Bed::new(), FakePackages::default());
    assert_eq!(
        package_decision(&bed, &pm, &conv(None)),
        package::Decision::Install
    );
    pm.installed
        .borrow_mut()
        .insert("sl".into(), "5.02-1".into());
    assert_eq!(
        package_decision(&bed, &pm, &conv(Some("5.02-1"))),
        package::Decision::TakeOver {
            version: "5.02-1".into()
        }
    );
    assert_eq!(
        package_decision(&bed, &pm, &conv(Some("5.03"))),
        package::Decision::Replace {
            was: "5.02-1".into()
        }
    );
    let d = package_decision(&bed, &pm, &adopted);
    assert_eq!(
        d,
        package::Decision::Keep {
            kept: Kept::Held,
            now: Some("5.02-1".into())
        }
    );
    assert_eq!(d.outcome(), Outcome::Held);

    let rec = owned("app/p", Shape::Package, "sl", None);
    bed.store.state.record_owned(rec.clone());
    let d = package_decision(&bed, &pm, &conv(None));
    assert_eq!(
        d,
        package::Decision::Unchanged {
            version: "5.02-1".into(),
            rec: rec.clone()
        }
    );
    let any = conv(None);
    let Resource::Package(spec) = &any.resources[0] else {
        unreachable!()
    };
    assert_eq!(d.preview(spec), "5.02-1 is installed, as declared");
    assert_eq!(
        package_decision(&bed, &pm, &conv(Some("5.03"))),
        package::Decision::Upgrade {
            was: "5.02-1".into(),
            found: false
        }
    );
    pm.installed.borrow_mut().clear();
    let d = package_decision(&bed, &pm, &conv(None));
    assert_eq!(d, package::Decision::Reinstall { found: false });
    assert_eq!(d.outcome(), Outcome::Created);
}

#[test]
fn a_held_package_removed_is_kept_gone_and_the_hosts_own_unrecorded_is_checked() {
    let (mut bed, pm) = (Bed::new(), FakePackages::default());
    bed.store
        .state
        .record_held(held("app/p", Shape::Package, "sl", "package 5.02-1"));
    let adopted = declaration("adopted", &[], json!([pkg("sl", None)]));
    let d = package_decision(&bed, &pm, &adopted);
    assert_eq!(
        d,
        package::Decision::Keep {
            kept: Kept::Gone,
            now: None
        }
    );
    assert_eq!(d.outcome(), Outcome::ChangedBySomethingElse);

    // The host's own package at the declared version, recorded without it: checked again.
    let own = crate::declaration::validate::OWN_PACKAGE;
    let d = declaration("converged", &[], json!([pkg(own, Some("1.0"))]));
    pm.installed.borrow_mut().insert(own.into(), "1.0".into());
    let rec = owned("app/p", Shape::Package, own, None);
    bed.store.state.record_owned(rec.clone());
    let decided = package_decision(&bed, &pm, &d);
    assert_eq!(
        decided,
        package::Decision::CheckHost {
            version: "1.0".into(),
            rec
        }
    );
    assert_eq!(decided.outcome(), Outcome::Changed);
}

// The service applier.

fn svc(state: &str, enabled: bool) -> Value {
    json!({"id": "app/s", "module": "app", "type": "service", "name": "nginx",
           "state": state, "enabled": enabled})
}

fn service_decision(bed: &Bed, sm: &FakeServices, d: &Declaration) -> service::Decision {
    let Resource::Service(spec) = &d.resources[0] else {
        panic!("not a service")
    };
    let before = records(bed);
    let r = service::read(sm, &bed.store.state, d, spec).unwrap();
    let decision = service::decide(&r, spec);
    assert!(sm.calls.borrow().is_empty(), "deciding starts nothing");
    assert_eq!(records(bed), before, "deciding records nothing");
    decision
}

#[test]
fn service_decisions_each_from_its_status_and_records() {
    let (bed, sm) = (Bed::new(), FakeServices::default());
    let run = declaration("converged", &[], json!([svc("running", true)]));
    let d = service_decision(&bed, &sm, &run);
    assert!(
        matches!(&d, service::Decision::NotInstalled { detail } if detail == "LoadState=not-found"),
        "{d:?}"
    );
    assert_eq!(d.outcome(), Outcome::Failed);

    sm.unit("nginx", false, false);
    let d = service_decision(&bed, &sm, &run);
    assert!(
        matches!(&d, service::Decision::Change { from, record } if !from.running && !record.found),
        "{d:?}"
    );
    let Resource::Service(spec) = &run.resources[0] else {
        unreachable!()
    };
    assert_eq!(
        d.preview(spec),
        "is stopped disabled; would be made running enabled"
    );

    sm.unit("nginx", true, true);
    let d = service_decision(&bed, &sm, &run);
    assert!(
        matches!(&d, service::Decision::Unchanged { was: None, record } if record.found),
        "found running: taken over as found, {d:?}"
    );

    let adopted = declaration("adopted", &[], json!([svc("stopped", false)]));
    let d = service_decision(&bed, &sm, &adopted);
    assert_eq!(
        d,
        service::Decision::Keep {
            kept: Kept::Held,
            now: "service running enabled".into()
        }
    );
    assert_eq!(d.outcome(), Outcome::Held);
}

// The directory applier.

fn dir_decl(mode: &str) -> Declaration {
    declaration(
        mode,
        &[],
        json!([{"id": "app/d", "module": "app", "type": "directory", "path": "/srv/d"}]),
    )
}

fn directory_decision(bed: &Bed, d: &Declaration) -> directory::Decision {
    let Resource::Directory(spec) = &d.resources[0] else {
        panic!("not a directory")
    };
    let before = records(bed);
    let root = crate::beneath::Root::open(bed.dir.path()).unwrap();
    let r = directory::read_for(&root, bed.dir.path(), &bed.store.state, d, spec).unwrap();
    let decision = directory::decide(&r);
    assert_eq!(records(bed), before, "deciding records nothing");
    decision
}

fn set_mode(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn directory_decisions_each_from_what_is_there_and_recorded() {
    let mut bed = Bed::new();
    let (conv, adopted) = (dir_decl("converged"), dir_decl("adopted"));
    let path = bed.dir.path().join("srv/d");
    assert_eq!(directory_decision(&bed, &conv), directory::Decision::Create);
    std::fs::create_dir_all(&path).unwrap();
    set_mode(&path, 0o755);
    assert_eq!(
        directory_decision(&bed, &conv),
        directory::Decision::TakeOver
    );
    let d = directory_decision(&bed, &adopted);
    assert!(
        matches!(&d, directory::Decision::Keep { kept: Kept::Held, print: Some(p) } if p.starts_with("directory 0755 ")),
        "{d:?}"
    );
    set_mode(&path, 0o700);
    let d = directory_decision(&bed, &conv);
    assert!(
        matches!(&d, directory::Decision::TakeOverAndSet { print } if print.starts_with("directory 0700 ")),
        "{d:?}"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o700,
        "deciding sets nothing"
    );

    let rec = owned("app/d", Shape::Directory, "/srv/d", None);
    bed.store.state.record_owned(rec.clone());
    assert_eq!(
        directory_decision(&bed, &conv),
        directory::Decision::Set { found: false }
    );
    set_mode(&path, 0o755);
    assert_eq!(
        directory_decision(&bed, &conv),
        directory::Decision::Unchanged { rec }
    );
    std::fs::remove_dir(&path).unwrap();
    let d = directory_decision(&bed, &conv);
    assert_eq!(d, directory::Decision::Recreate { found: false });
    assert_eq!(
        (d.outcome(), d.preview().as_str()),
        (Outcome::Created, "missing; would be created again")
    );
}

// The file applier.

fn file_decl(mode: &str) -> Declaration {
    declaration(
        mode,
        &[],
        json!([{"id": "app/f", "module": "app", "type": "file", "path": "/etc/f.conf",
                "content": "declared\n"}]),
    )
}

/// The file decision for `d`'s one file (`rebuilt`: as after a lost store), and what a preview
/// says of it.
fn file_decision(bed: &Bed, d: &Declaration, rebuilt: bool) -> (file::Decision, (Outcome, String)) {
    let Resource::File(spec) = &d.resources[0] else {
        panic!("not a file")
    };
    let before = records(bed);
    let on_disk = std::fs::read(bed.dir.path().join("etc/f.conf")).ok();
    let root = crate::beneath::Root::open(bed.dir.path()).unwrap();
    let r = file::read_for(
        &root,
        bed.dir.path(),
        &bed.store.state,
        d,
        None,
        spec,
        rebuilt,
    )
    .unwrap();
    let decision = file::decide(&r, spec).unwrap();
    let said = file::preview(&r, spec, &decision).unwrap();
    assert_eq!(records(bed), before, "deciding records nothing");
    assert_eq!(
        std::fs::read(bed.dir.path().join("etc/f.conf")).ok(),
        on_disk,
        "deciding writes nothing"
    );
    (decision, said)
}

fn write_file(bed: &Bed, content: &str) {
    let etc = bed.dir.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("f.conf"), content).unwrap();
    set_mode(&etc.join("f.conf"), 0o644);
}

#[test]
fn file_decisions_without_a_record_each_from_what_is_there() {
    let mut bed = Bed::new();
    let (conv, adopted) = (file_decl("converged"), file_decl("adopted"));
    let (d, said) = file_decision(&bed, &conv, false);
    assert_eq!(d, file::Decision::Create);
    assert_eq!(
        said,
        (Outcome::Created, "would be written (9 bytes)".into())
    );

    write_file(&bed, "found\n");
    let (d, said) = file_decision(&bed, &conv, false);
    assert_eq!(
        d,
        file::Decision::Found {
            known: None,
            stamp: None
        }
    );
    assert_eq!(
        said,
        (
            Outcome::Changed,
            "found file would be replaced, its original saved first".into()
        )
    );
    let (_, said) = file_decision(&bed, &adopted, false);
    assert_eq!(
        said,
        (
            Outcome::Held,
            "found; would be kept as it is, its original saved".into()
        )
    );

    write_file(&bed, "declared\n");
    let (_, said) = file_decision(&bed, &conv, false);
    assert_eq!(said.0, Outcome::Unchanged, "found as declared: taken over");
    let (d, _) = file_decision(&bed, &conv, true);
    assert_eq!(d, file::Decision::Rebuilt { stamp: None });

    // Held as found, then removed by something else: not recreated.
    std::fs::remove_file(bed.dir.path().join("etc/f.conf")).unwrap();
    bed.store
        .state
        .record_held(held("app/f", Shape::File, "/etc/f.conf", "sha256:aa"));
    let (d, said) = file_decision(&bed, &adopted, false);
    assert_eq!(d, file::Decision::Gone);
    assert_eq!(said.0, Outcome::ChangedBySomethingElse);
}

#[test]
fn file_decisions_with_a_record_each_from_what_is_there() {
    let mut bed = Bed::new();
    let conv = file_decl("converged");
    let digest = crate::store::digest(b"declared\n");
    let rec = owned("app/f", Shape::File, "/etc/f.conf", Some(digest.clone()));
    bed.store.state.record_owned(rec.clone());
    let (d, said) = file_decision(&bed, &conv, false);
    assert_eq!(d, file::Decision::Recreate { found: false });
    assert_eq!(
        said,
        (Outcome::Created, "missing; would be written again".into())
    );

    write_file(&bed, "declared\n");
    let (d, said) = file_decision(&bed, &conv, false);
    let file::Decision::Unchanged { same, was } = &d else {
        panic!("not unchanged: {d:?}")
    };
    assert_eq!((**was).clone(), rec);
    assert_eq!(same.digest.as_deref(), Some(digest.as_str()));
    assert_eq!(said.0, Outcome::Unchanged);

    write_file(&bed, "edited\n");
    let (d, said) = file_decision(&bed, &conv, false);
    assert_eq!(d, file::Decision::Rewrite { found: false });
    assert_eq!(said.0, Outcome::Changed);
}

// The container applier.

fn ctr(mode: &str) -> Declaration {
    declaration(
        mode,
        &[],
        json!([{"id": "app/c", "module": "app", "type": "container", "name": "web",
                "image": "lab/busybox:1", "command": ["/bin/sh"]}]),
    )
}

fn container_decision(bed: &Bed, rt: &FakeRuntime, d: &Declaration) -> container::Decision {
    let Resource::Container(spec) = &d.resources[0] else {
        panic!("not a container")
    };
    let before = records(bed);
    rt.calls.borrow_mut().clear();
    let r = container::read(rt, &bed.store.state, d, spec).unwrap();
    let decision = container::decide(&r, spec);
    assert!(rt.calls.borrow().is_empty(), "deciding runs nothing");
    assert_eq!(records(bed), before, "deciding records nothing");
    decision
}

/// Labels the container at `web` as the host's own for `d`'s one container.
fn label_ours(rt: &FakeRuntime, d: &Declaration) {
    let Resource::Container(spec) = &d.resources[0] else {
        panic!("not a container")
    };
    let mut all = rt.containers.borrow_mut();
    let c = all.get_mut("web").unwrap();
    c.labels.insert(container::LABEL_ID.into(), spec.id.clone());
    c.labels
        .insert(container::LABEL_SPEC.into(), container::spec_digest(spec));
}

#[test]
fn container_decisions_each_from_what_the_runtime_shows() {
    use container::Act;
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let (conv, adopted) = (ctr("converged"), ctr("adopted"));
    assert_eq!(container_decision(&bed, &rt, &conv).act, Act::Create);

    rt.found("web", "lab/busybox:1");
    let d = container_decision(&bed, &rt, &conv);
    assert!(matches!(d.act, Act::ReplaceFound { .. }), "{d:?}");
    let d = container_decision(&bed, &rt, &adopted);
    assert!(
        matches!(
            d.act,
            Act::Keep {
                kept: Kept::Held,
                found: Some(_)
            }
        ),
        "{d:?}"
    );
    assert_eq!(d.act.outcome(), Outcome::Held);

    // The host's record beside a container that is not its own: disowned first, then found.
    let rec = owned("app/c", Shape::Container, "web", None);
    bed.store.state.record_owned(rec.clone());
    let d = container_decision(&bed, &rt, &conv);
    assert_eq!(d.disown, Some(rec.clone()));
    assert!(matches!(d.act, Act::ReplaceFound { .. }), "{d:?}");

    // Its own: it differs (the image's id aside, what the fake made matches), or is stopped.
    label_ours(&rt, &conv);
    let d = container_decision(&bed, &rt, &conv);
    assert_eq!(d.disown, None);
    match &d.act {
        Act::Replace { diffs } => assert!(!diffs.is_empty()),
        Act::Unchanged { was } => assert_eq!(was.as_ref(), Some(&rec)),
        other => panic!("neither replaced nor unchanged: {other:?}"),
    }
    rt.containers.borrow_mut().clear();
    let d = container_decision(&bed, &rt, &conv);
    assert_eq!(d.act, Act::Recreate);
}

#[test]
fn a_container_of_the_hosts_own_is_unchanged_when_running_and_started_when_stopped() {
    use container::Act;
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let conv = ctr("converged");
    let Resource::Container(spec) = &conv.resources[0] else {
        panic!("not a container")
    };
    // Made by the applier itself, so it is exactly as declared.
    let done = container::apply_with(&mut bed.cx(&conv), &rt, spec).unwrap();
    assert_eq!(done.outcome, Outcome::Created);
    let rec = bed.store.state.owned("app/c").cloned();
    let d = container_decision(&bed, &rt, &conv);
    assert_eq!(d.act, Act::Unchanged { was: rec });
    rt.stop("web");
    let d = container_decision(&bed, &rt, &conv);
    assert!(
        matches!(&d.act, Act::Start { was } if !was.running),
        "{d:?}"
    );
    assert_eq!(
        (d.act.outcome(), d.act.preview(spec).as_str()),
        (Outcome::Changed, "is exited; would be started again")
    );
}

// The action applier.

#[test]
fn action_decisions_from_what_verify_says() {
    let dir = tempfile::tempdir().unwrap();
    let runner = run::SystemRunner;
    let spec = |verify: &str| {
        let d = declaration(
            "converged",
            &[],
            json!([{"id": "app/a", "module": "app", "type": "action",
                    "run": ["touch", "done"], "verify": [verify]}]),
        );
        let Resource::Action(a) = &d.resources[0] else {
            panic!("not an action")
        };
        a.clone()
    };
    let passes = action::read(&runner, dir.path(), &spec("true")).unwrap();
    assert_eq!(action::decide(&passes), action::Decision::Done);
    let fails = action::read(&runner, dir.path(), &spec("false")).unwrap();
    let d = action::decide(&fails);
    assert_eq!(d, action::Decision::Run);
    assert_eq!(
        (d.outcome(), d.preview(&spec("false")).as_str()),
        (
            Outcome::Changed,
            "verify fails; [\"touch\", \"done\"] would run"
        )
    );
    assert!(!dir.path().join("done").exists(), "deciding runs nothing");
}

// Removal of a record no longer declared.

fn file_removal(bed: &Bed, rec: &Owned, release: bool) -> file::Removal {
    let on_disk = std::fs::read(bed.dir.path().join("etc/f.conf")).ok();
    let root = crate::beneath::Root::open(bed.dir.path()).unwrap();
    let r = file::read_removal(&root, &bed.store.state, None, rec).unwrap();
    let decision = file::decide_removal(&r, rec, release);
    assert_eq!(
        std::fs::read(bed.dir.path().join("etc/f.conf")).ok(),
        on_disk,
        "deciding removes nothing"
    );
    decision
}

#[test]
fn file_removal_decisions_from_the_record_and_what_is_on_disk() {
    let mut bed = Bed::new();
    write_file(&bed, "declared\n");
    let digest = crate::store::digest(b"declared\n");
    let made = owned("app/f", Shape::File, "/etc/f.conf", Some(digest.clone()));
    assert_eq!(file_removal(&bed, &made, false), file::Removal::Remove);
    write_file(&bed, "edited\n");
    let d = file_removal(&bed, &made, false);
    assert!(
        matches!(&d, file::Removal::LeaveEdited { why } if why.contains(&digest)),
        "{d:?}"
    );
    assert_eq!(d.preview().0, Outcome::Forgotten);

    let found = Owned {
        found: true,
        ..made.clone()
    };
    assert_eq!(file_removal(&bed, &found, true), file::Removal::LeaveFound);
    bed.store.state.add_original(crate::store::Original {
        key: "/etc/f.conf".into(),
        saved: "/var/lib/mesh-host/originals/x-f.conf".into(),
        digest: "sha256:aa".into(),
        mode: None,
        uid: None,
        gid: None,
    });
    assert_eq!(file_removal(&bed, &found, false), file::Removal::LeaveFound);
    let d = file_removal(&bed, &found, true);
    assert_eq!(
        d,
        file::Removal::PutBack {
            saved: "/var/lib/mesh-host/originals/x-f.conf".into()
        }
    );
    assert_eq!(d.preview().0, Outcome::Removed);
}

#[test]
fn container_removal_decisions_from_its_labels() {
    use container::{Asked, Removal};
    let rt = FakeRuntime::default();
    let conv = ctr("converged");
    let rec = owned("app/c", Shape::Container, "web", None);
    assert_eq!(
        container::decide_removal(rt.get("web").as_ref(), &rec, Asked::Owned),
        Removal::Gone
    );
    rt.found("web", "lab/busybox:1");
    let d = container::decide_removal(rt.get("web").as_ref(), &rec, Asked::Owned);
    assert!(matches!(d, Removal::Leave { .. }), "{d:?}");
    assert_eq!(d.preview().0, Outcome::Forgotten);
    label_ours(&rt, &conv);
    assert_eq!(
        container::decide_removal(rt.get("web").as_ref(), &rec, Asked::Owned),
        Removal::Remove
    );
    // A recovered record names both the id and the spec; the id alone is not enough.
    let d = container::decide_removal(rt.get("web").as_ref(), &rec, Asked::Recovered);
    assert!(matches!(d, Removal::Leave { .. }), "{d:?}");
    let found = Owned { found: true, ..rec };
    let d = container::decide_removal(rt.get("web").as_ref(), &found, Asked::Owned);
    assert!(
        matches!(d, Removal::Leave { .. }),
        "found, never removed: {d:?}"
    );
    assert!(rt.calls.borrow().is_empty(), "deciding removes nothing");
}

// The act reports the outcome its decision says, so the preview (which says the decision's
// outcome) and the act cannot drift.

#[test]
fn each_act_reports_the_outcome_of_the_decision_it_executes() {
    let mut bed = Bed::new();
    let mut seen = Vec::new();
    let pm = FakePackages::default();
    pm.offer("sl", &["5.02-1", "5.03"]);
    for d in [
        declaration("converged", &[], json!([pkg("sl", None)])),
        declaration("converged", &[], json!([pkg("sl", None)])),
        declaration("converged", &[], json!([pkg("sl", Some("5.02-1"))])),
    ] {
        let decision = package_decision(&bed, &pm, &d);
        let want = decision.outcome();
        let Resource::Package(spec) = &d.resources[0] else {
            unreachable!()
        };
        let done = package::execute(&mut bed.cx(&d), &pm, spec, decision).unwrap();
        assert_eq!(done.outcome, want, "{}", done.detail);
        seen.push(want);
        pm.calls.borrow_mut().clear();
    }

    let sm = FakeServices::default();
    let run = declaration("converged", &[], json!([svc("running", true)]));
    let Resource::Service(spec) = &run.resources[0] else {
        unreachable!()
    };
    let decision = service_decision(&bed, &sm, &run);
    assert!(service::execute(&mut bed.cx(&run), &sm, spec, decision).is_err());
    sm.unit("nginx", false, false);
    for _ in 0..2 {
        let decision = service_decision(&bed, &sm, &run);
        let want = decision.outcome();
        let done = service::execute(&mut bed.cx(&run), &sm, spec, decision).unwrap();
        assert_eq!(done.outcome, want, "{}", done.detail);
        seen.push(want);
        sm.calls.borrow_mut().clear();
    }

    let conv = dir_decl("converged");
    let Resource::Directory(spec) = &conv.resources[0] else {
        unreachable!()
    };
    let path = bed.dir.path().join("srv/d");
    for change in [None, Some(0o700), None] {
        if let Some(mode) = change {
            set_mode(&path, mode);
        }
        let decision = directory_decision(&bed, &conv);
        let want = decision.outcome();
        let root = crate::beneath::Root::open(bed.dir.path()).unwrap();
        let r = directory::read_for(&root, bed.dir.path(), &bed.store.state, &conv, spec).unwrap();
        let done = directory::execute(&mut bed.cx(&conv), spec, &r.want, decision).unwrap();
        assert_eq!(done.outcome, want, "{}", done.detail);
        seen.push(want);
    }

    let adopted = file_decl("adopted");
    let conv = file_decl("converged");
    write_file(&bed, "found\n");
    for d in [&adopted, &conv, &conv] {
        let Resource::File(spec) = &d.resources[0] else {
            unreachable!()
        };
        let (_, (want, _)) = file_decision(&bed, d, false);
        let root = crate::beneath::Root::open(bed.dir.path()).unwrap();
        let r = file::read_for(
            &root,
            bed.dir.path(),
            &bed.store.state,
            d,
            None,
            spec,
            false,
        )
        .unwrap();
        let decision = file::decide(&r, spec).unwrap();
        let done = file::execute(&mut bed.cx(d), spec, &r, decision).unwrap();
        assert_eq!(done.outcome, want, "{}", done.detail);
        seen.push(want);
    }

    let rt = FakeRuntime::default();
    let conv = ctr("converged");
    let Resource::Container(spec) = &conv.resources[0] else {
        unreachable!()
    };
    for stop in [false, false, true] {
        if stop {
            rt.stop("web");
        }
        let decision = container_decision(&bed, &rt, &conv);
        let want = decision.act.outcome();
        let done = container::execute(&mut bed.cx(&conv), &rt, spec, decision).unwrap();
        assert_eq!(done.outcome, want, "{}", done.detail);
        seen.push(want);
    }
    use Outcome::*;
    assert_eq!(
        seen,
        [
            Created, Unchanged, Changed, // the package
            Changed, Unchanged, // the service
            Created, Changed, Unchanged, // the directory
            Held, Changed, Unchanged, // the file
            Created, Unchanged, Changed, // the container
        ],
        "every act met the decision it was meant to"
    );
}
