//! The container applier against the recording fake runtime: create, unchanged, replace, hold,
//! take, remove, and what it reports.

use super::*;
use crate::declaration::{Declaration, Resource};
use crate::system::fake::{declaration, Bed, FakeRuntime};
use serde_json::{json, Value};

fn web(env: &str) -> Value {
    json!({"id": "app/web", "module": "app", "type": "container", "name": "web",
           "image": "lab/busybox:1", "command": ["/bin/httpd", "-f", "-p", "80"],
           "env": {"MODE": env},
           "ports": [{"host_port": 8080, "container_port": 80, "proto": "tcp"}],
           "restart": "unless-stopped"})
}

fn spec(d: &Declaration) -> &ContainerSpec {
    match &d.resources[0] {
        Resource::Container(c) => c,
        other => panic!("not a container: {other:?}"),
    }
}

fn apply(bed: &mut Bed, rt: &FakeRuntime, d: &Declaration) -> Result<Done, ResourceError> {
    apply_with(&mut bed.cx(d), rt, spec(d))
}

fn outcome(r: Result<Done, impl std::fmt::Display>) -> (Outcome, String) {
    let d = r.unwrap_or_else(|e| panic!("failed: {e}"));
    (d.outcome, d.detail)
}

#[test]
fn created_unchanged_replaced_when_it_differs_then_removed() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let d1 = declaration("converged", &[], json!([web("one")]));
    assert_eq!(outcome(apply(&mut bed, &rt, &d1)).0, Outcome::Created);
    let first = rt.get("web").unwrap();
    assert!(first.running);
    assert_eq!(first.labels[LABEL_ID], "app/web");
    assert_eq!(first.labels[LABEL_SPEC], spec_digest(spec(&d1)));
    let rec = bed.store.state.owned("app/web").cloned().unwrap();
    assert!(!rec.found);
    assert_eq!(bed.store.state.pending, None);

    rt.calls.borrow_mut().clear();
    assert_eq!(outcome(apply(&mut bed, &rt, &d1)).0, Outcome::Unchanged);
    assert!(
        rt.calls.borrow().is_empty(),
        "an unchanged container is not touched"
    );

    let d2 = declaration("converged", &[], json!([web("two")]));
    let (o, detail) = outcome(apply(&mut bed, &rt, &d2));
    assert_eq!(o, Outcome::Changed);
    assert!(detail.contains("environment variable MODE"), "{detail}");
    let second = rt.get("web").unwrap();
    assert_ne!(second.id, first.id, "replaced, not edited");
    assert_eq!(second.env["MODE"], "two");
    assert_eq!(*rt.calls.borrow(), ["remove web", "run web"]);

    let rec = bed.store.state.owned("app/web").cloned().unwrap();
    let empty = declaration("converged", &[], json!([]));
    let (o, _) = outcome(remove_with(&mut bed.cx(&empty), &rt, &rec));
    assert_eq!(o, Outcome::Removed);
    assert_eq!(rt.get("web"), None);
}

#[test]
fn an_owned_container_stopped_by_hand_is_started_again() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let d = declaration("converged", &[], json!([web("one")]));
    outcome(apply(&mut bed, &rt, &d));
    let id = rt.get("web").unwrap().id;
    rt.stop("web");
    let (o, detail) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::Changed);
    assert!(detail.contains("started again"), "{detail}");
    let now = rt.get("web").unwrap();
    assert!(now.running);
    assert_eq!(now.id, id, "started, not replaced");
}

#[test]
fn found_on_an_adopted_node_is_held_untouched_and_a_stop_is_reported_not_reverted() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let found = rt.found("web", "predecessor/web:7");
    let d = declaration("adopted", &[], json!([web("one")]));
    let (o, detail) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::Held);
    assert!(detail.contains("predecessor/web:7"), "{detail}");
    assert!(
        rt.calls.borrow().is_empty(),
        "nothing done to a held container"
    );
    assert!(bed.store.state.owned("app/web").is_none());
    let held = bed.store.state.held("app/web").cloned().unwrap();
    assert!(held.digest.as_deref().unwrap().contains(&found));

    assert_eq!(outcome(apply(&mut bed, &rt, &d)).0, Outcome::Held);

    rt.stop("web");
    let (o, detail) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::ChangedBySomethingElse);
    assert!(detail.contains("stopped by something else"), "{detail}");
    assert!(
        rt.calls.borrow().is_empty(),
        "a held container is never restarted"
    );
    assert!(!rt.get("web").unwrap().running);

    rt.containers.borrow_mut().remove("web");
    rt.found("web", "predecessor/web:8");
    let (o, detail) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::ChangedBySomethingElse);
    assert!(detail.contains("replaced by something else"), "{detail}");

    rt.containers.borrow_mut().remove("web");
    let (o, detail) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::ChangedBySomethingElse);
    assert!(detail.contains("removed"), "{detail}");
    assert_eq!(rt.get("web"), None, "not recreated while held");
}

#[test]
fn taking_the_module_replaces_the_found_container_with_the_hosts_own() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let found = rt.found("web", "predecessor/web:7");
    let held = declaration("adopted", &[], json!([web("one")]));
    assert_eq!(outcome(apply(&mut bed, &rt, &held)).0, Outcome::Held);

    let taken = declaration("adopted", &["app"], json!([web("one")]));
    let (o, detail) = outcome(apply(&mut bed, &rt, &taken));
    assert_eq!(o, Outcome::Changed);
    assert!(detail.contains("replaced by the declared one"), "{detail}");
    let now = rt.get("web").unwrap();
    assert_ne!(now.id, found);
    assert_eq!(now.image, "lab/busybox:1");
    assert_eq!(now.labels[LABEL_ID], "app/web");
    assert!(bed.store.state.held("app/web").is_none());
    let rec = bed.store.state.owned("app/web").cloned().unwrap();
    assert!(
        !rec.found,
        "the host created the container that replaced the found one"
    );

    assert_eq!(outcome(apply(&mut bed, &rt, &taken)).0, Outcome::Unchanged);
}

#[test]
fn found_on_a_converged_node_is_replaced() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    rt.found("web", "predecessor/web:7");
    let d = declaration("converged", &[], json!([web("one")]));
    assert_eq!(outcome(apply(&mut bed, &rt, &d)).0, Outcome::Changed);
    assert_eq!(rt.get("web").unwrap().labels[LABEL_ID], "app/web");
}

#[test]
fn a_container_that_does_not_keep_running_fails_and_is_not_recorded() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    rt.exits.set(true);
    let d = declaration("converged", &[], json!([web("one")]));
    let e = apply(&mut bed, &rt, &d).err().expect("fails").to_string();
    assert!(e.contains("is not running") && e.contains("web"), "{e}");
    assert!(bed.store.state.owned("app/web").is_none());
    assert!(
        bed.store.state.pending.is_some(),
        "the intent says what was tried"
    );
}

#[test]
fn the_hosts_own_labelled_container_without_a_record_is_not_found() {
    // An apply that died between creating the container and recording it.
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let d = declaration("adopted", &[], json!([web("one")]));
    rt.run(&wanted(spec(&d), &spec_digest(spec(&d)))).unwrap();
    let (o, _) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::Unchanged);
    assert!(bed.store.state.held("app/web").is_none());
    assert!(bed.store.state.owned("app/web").is_some());
}

#[test]
fn removal_leaves_a_container_the_host_did_not_create() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let d = declaration("converged", &[], json!([web("one")]));
    outcome(apply(&mut bed, &rt, &d));
    let rec = bed.store.state.owned("app/web").cloned().unwrap();
    // Somebody replaced the host's container with their own under the same name.
    rt.containers.borrow_mut().remove("web");
    rt.found("web", "someone/else:1");
    let empty = declaration("converged", &[], json!([]));
    let (o, detail) = outcome(remove_with(&mut bed.cx(&empty), &rt, &rec));
    assert_eq!(o, Outcome::Forgotten);
    assert!(detail.contains("not one the host created"), "{detail}");
    assert!(rt.get("web").is_some());
    assert!(rt.calls.borrow().iter().all(|c| !c.starts_with("remove")));
}

#[test]
fn a_container_swapped_for_another_on_the_same_port_frees_the_port_first() {
    let mut bed = Bed::new();
    let rt = FakeRuntime::default();
    let d1 = declaration("converged", &[], json!([web("one")]));
    assert_eq!(outcome(apply(&mut bed, &rt, &d1)).0, Outcome::Created);
    let mut other = web("one");
    other["id"] = json!("web/next");
    other["name"] = json!("web-next");
    let d2 = declaration("converged", &[], json!([other]));
    let (o, detail) = outcome(apply(&mut bed, &rt, &d2));
    assert_eq!(o, Outcome::Created, "{detail}");
    assert!(detail.contains("first removed container web"), "{detail}");
    assert!(rt.get("web").is_none(), "the old container is gone");
    assert!(rt.get("web-next").is_some());
    assert!(
        bed.store.state.owned.iter().all(|o| o.id != "app/web"),
        "{:?}",
        bed.store.state.owned
    );
}

#[test]
fn a_container_put_in_place_of_the_hosts_own_is_found_not_replaced() {
    let mut bed = Bed::new();
    let rt = FakeRuntime::default();
    let d = declaration("adopted", &[], json!([web("one")]));
    assert_eq!(outcome(apply(&mut bed, &rt, &d)).0, Outcome::Created);
    // Someone removes the host's container and runs their own under the same name.
    rt.remove("web").unwrap();
    rt.run(&crate::system::NewContainer {
        name: "web".into(),
        image: "theirs:1".into(),
        command: vec![],
        env: Default::default(),
        ports: vec![],
        restart: None,
        networks: vec![],
        labels: Default::default(),
    })
    .unwrap();
    let (o, detail) = outcome(apply(&mut bed, &rt, &d));
    assert_eq!(o, Outcome::Held, "{detail}");
    assert_eq!(
        rt.get("web").unwrap().image,
        "theirs:1",
        "theirs is left running"
    );
    assert!(bed.store.state.owned("app/web").is_none());
}

#[test]
fn a_renamed_container_does_not_leave_the_old_one_behind() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let d = declaration("converged", &[], json!([web("one")]));
    outcome(apply(&mut bed, &rt, &d));
    let mut renamed = web("one");
    renamed["name"] = json!("web2");
    let d2 = declaration("converged", &[], json!([renamed]));
    assert_eq!(outcome(apply(&mut bed, &rt, &d2)).0, Outcome::Created);
    assert_eq!(rt.get("web"), None);
    assert!(rt.get("web2").unwrap().running);
    assert_eq!(bed.store.state.owned.len(), 1);
    assert_eq!(bed.store.state.owned[0].key, "web2");
}

#[test]
fn the_runtimes_defaults_are_not_differences() {
    let d = declaration(
        "converged",
        &[],
        json!([{"id": "c", "type": "container", "name": "c", "image": "busybox"}]),
    );
    let s = spec(&d);
    let digest = spec_digest(s);
    let rt = FakeRuntime::default();
    rt.run(&wanted(s, &digest)).unwrap();
    let mut c = rt.get("c").unwrap();
    c.image = "docker.io/library/busybox:latest".into();
    c.restart = String::new();
    c.env.insert("container".into(), "podman".into());
    assert_eq!(differences(&c, s, &digest), Vec::<String>::new());
    c.command = vec!["/bin/other".into()];
    assert_eq!(differences(&c, s, &digest), Vec::<String>::new());
    c.labels.clear();
    assert_eq!(
        differences(&c, s, &digest),
        ["not created by the host from this declaration"]
    );
}

#[test]
fn a_recovered_record_removes_its_container_only_while_it_is_the_one_recorded() {
    let (mut bed, rt) = (Bed::new(), FakeRuntime::default());
    let d = declaration("converged", &[], json!([web("one")]));
    outcome(apply(&mut bed, &rt, &d));
    let rec = bed.store.state.owned("app/web").cloned().unwrap();
    let empty = declaration("converged", &[], json!([]));
    // The same name, the host's id label, but another spec: not the container the record names.
    let mut other = rec.clone();
    other.digest = Some("sha256:another".into());
    let (o, detail) = outcome(remove_asked(
        &mut bed.cx(&empty),
        &rt,
        &other,
        Asked::Recovered,
    ));
    assert_eq!(o, Outcome::ChangedBySomethingElse);
    assert!(
        detail.contains("not the one the recovered record"),
        "{detail}"
    );
    assert!(rt.get("web").is_some());
    // The one recorded is removed.
    let (o, _) = outcome(remove_asked(
        &mut bed.cx(&empty),
        &rt,
        &rec,
        Asked::Recovered,
    ));
    assert_eq!(o, Outcome::Removed);
    assert_eq!(rt.get("web"), None);
    // Recreated by someone else under the same name: left in place, reported.
    rt.found("web", "lab/busybox:1");
    let (o, _) = outcome(remove_asked(
        &mut bed.cx(&empty),
        &rt,
        &rec,
        Asked::Recovered,
    ));
    assert_eq!(o, Outcome::ChangedBySomethingElse);
    assert!(rt.get("web").is_some());
    assert_eq!(
        rt.calls
            .borrow()
            .iter()
            .filter(|c| c.starts_with("remove"))
            .count(),
        1
    );
}
