//! The container applier: a declared container created through the machine's runtime, compared,
//! replaced when it differs, and kept exactly as it is when found on an adopted node.
//!
//! A container's configuration cannot be changed in place, so converging one means replacing it.
//! The host labels what it creates (`mesh-host.id`, and `mesh-host.spec`, a digest of what was
//! declared), which is its evidence on the machine: a container that carries them was made by the
//! host from that declaration, and removal only ever removes such a container.
//!
//! A found container (one at a declared name with no record) is held on an adopted node until its
//! module is taken; taking it replaces it with the declared one, which the host then created, so
//! it is recorded as the host's own (`found: false`) and removed when no longer declared.

use super::{Cx, Done, Outcome};
use crate::declaration::{ContainerSpec, PublishedPort, Shape};
use crate::runner::Runner;
use crate::store::{self, Held, Owned};
use crate::system::{self, normalize_image, Container, ContainerRuntime, NewContainer};
use std::collections::BTreeMap;

/// The label naming the resource a container was created for.
pub const LABEL_ID: &str = "mesh-host.id";
/// The label carrying the digest of the declaration a container was created from.
pub const LABEL_SPEC: &str = "mesh-host.spec";

/// What the digest of a container's declaration covers: everything that shapes it, in one order.
#[derive(serde::Serialize)]
struct Digested<'a> {
    image: &'a str,
    command: &'a [String],
    env: &'a BTreeMap<String, String>,
    ports: Vec<PublishedPort>,
    restart: Option<&'a str>,
    networks: &'a [String],
}

/// A digest of what the declaration asks of a container (not its id or module, which do not
/// shape it).
pub fn spec_digest(spec: &ContainerSpec) -> String {
    let mut ports = spec.ports.clone();
    system::sort_ports(&mut ports);
    let d = Digested {
        image: &spec.image,
        command: &spec.command,
        env: &spec.env,
        ports,
        restart: spec.restart.as_deref(),
        networks: &spec.networks,
    };
    store::digest(&serde_json::to_vec(&d).expect("a container declaration serializes"))
}

fn wanted(spec: &ContainerSpec, digest: &str) -> NewContainer {
    NewContainer {
        name: spec.name.clone(),
        image: spec.image.clone(),
        command: spec.command.clone(),
        env: spec.env.clone(),
        ports: spec.ports.clone(),
        restart: spec.restart.clone(),
        networks: spec.networks.clone(),
        labels: [
            (LABEL_ID.to_string(), spec.id.clone()),
            (LABEL_SPEC.to_string(), digest.to_string()),
        ]
        .into(),
    }
}

/// What a held container is compared by: its id, the image it runs and whether it runs. A
/// container stopped, or replaced by another under the same name, no longer matches.
fn fingerprint(c: &Container) -> String {
    format!(
        "container {} {} {}",
        c.id,
        c.image_id,
        if c.running { "running" } else { "stopped" }
    )
}

fn short(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

/// How a held container changed since it was held, in words.
fn what_changed(held: &str, now: &Container) -> String {
    let mut was = held.split_whitespace().skip(1);
    let (id, running) = (was.next().unwrap_or(""), was.nth(1).unwrap_or(""));
    if id != now.id {
        format!(
            "replaced by something else (was {}, now {} running {})",
            short(id),
            short(&now.id),
            now.image
        )
    } else if running == "running" && !now.running {
        format!(
            "stopped by something else (now {}, exit code {})",
            now.status, now.exit_code
        )
    } else if !now.running {
        format!("changed by something else (now {})", now.status)
    } else {
        "changed by something else (now running again)".to_string()
    }
}

/// Everything in which a container differs from its declaration; empty when it matches. The
/// runtime's defaults are not differences: an empty command or restart or network list leaves
/// them to the image and the runtime, and variables the runtime adds itself are not compared.
pub fn differences(c: &Container, spec: &ContainerSpec, digest: &str) -> Vec<String> {
    let mut d = Vec::new();
    if normalize_image(&c.image) != normalize_image(&spec.image) {
        d.push(format!("image {} (declared {})", c.image, spec.image));
    }
    if !spec.command.is_empty() && c.command != spec.command {
        d.push(format!(
            "command {:?} (declared {:?})",
            c.command, spec.command
        ));
    }
    for (k, v) in &spec.env {
        match c.env.get(k) {
            Some(have) if have == v => {}
            Some(_) => d.push(format!("environment variable {k} has another value")),
            None => d.push(format!("environment variable {k} is missing")),
        }
    }
    let mut ports = spec.ports.clone();
    system::sort_ports(&mut ports);
    if c.ports != ports {
        d.push(format!(
            "published ports {} (declared {})",
            ports_text(&c.ports),
            ports_text(&ports)
        ));
    }
    let restart = spec.restart.as_deref().unwrap_or("no");
    let have = if c.restart.is_empty() {
        "no"
    } else {
        c.restart.as_str()
    };
    if have != restart {
        d.push(format!("restart policy {have} (declared {restart})"));
    }
    if !spec.networks.is_empty() {
        let mut nets = spec.networks.clone();
        nets.sort();
        if c.networks != nets {
            d.push(format!(
                "networks {} (declared {})",
                c.networks.join(","),
                nets.join(",")
            ));
        }
    }
    if c.labels.get(LABEL_SPEC).map(String::as_str) != Some(digest) {
        d.push("not created by the host from this declaration".into());
    }
    d
}

fn ports_text(ports: &[PublishedPort]) -> String {
    if ports.is_empty() {
        return "none".into();
    }
    ports
        .iter()
        .map(|p| {
            let addr = p.host_address.as_deref().unwrap_or("*");
            format!(
                "{addr}:{}->{}/{}",
                p.host_port,
                p.container_port,
                p.proto.as_str()
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn describe_found(c: &Container) -> String {
    format!(
        "{} (image {}, {})",
        short(&c.id),
        c.image,
        if c.running { "running" } else { &c.status }
    )
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &ContainerSpec) -> Result<Done, String> {
    let rt = system::container_runtime(cx.runner)?;
    apply_with(cx, rt.as_ref(), spec)
}

pub(super) fn apply_with(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
) -> Result<Done, String> {
    let freed = free_ports(cx, rt, spec)?;
    let done = converge_resource(cx, rt, spec)?;
    Ok(if freed.is_empty() {
        done
    } else {
        Done::new(
            done.outcome,
            format!(
                "{}; first removed {} (no longer declared), which published the same host port",
                done.detail,
                freed.join(", ")
            ),
        )
    })
}

/// Removes the containers the host created that are no longer declared and publish a host port
/// this one needs: a declaration that swaps one container for another on the same port would
/// otherwise create the new one while the old still holds the port, fail, and never get as far
/// as removing the old. Returns the names removed.
fn free_ports(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
) -> Result<Vec<String>, String> {
    let declared: Vec<&str> = cx.decl.resources.iter().map(|r| r.id()).collect();
    let stale: Vec<Owned> = cx
        .store
        .state
        .owned
        .iter()
        .filter(|o| {
            o.shape == Shape::Container
                && !o.found
                && !declared.contains(&o.id.as_str())
                && o.key != spec.name
        })
        .cloned()
        .collect();
    let mut freed = Vec::new();
    for rec in stale {
        let Some(c) = inspect(rt, &rec.key)? else {
            continue;
        };
        let clash = c.ports.iter().any(|p| {
            spec.ports
                .iter()
                .any(|q| q.host_port == p.host_port && q.proto == p.proto)
        });
        if !clash {
            continue;
        }
        let done = remove_with(cx, rt, &rec)?;
        if done.outcome == Outcome::Removed {
            cx.forget(&rec)?;
            freed.push(format!("container {} ({})", rec.key, rec.id));
        }
    }
    Ok(freed)
}

fn converge_resource(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
) -> Result<Done, String> {
    let id = spec.id.as_str();
    let name = spec.name.as_str();
    let digest = spec_digest(spec);
    // The resource was renamed: the container the host made under the old name would otherwise
    // be orphaned, still holding its ports, since the new record replaces the old one.
    let renamed = cx
        .store
        .state
        .owned(id)
        .filter(|o| o.shape == Shape::Container && o.key != name)
        .cloned();
    if let Some(old) = renamed {
        remove_with(cx, rt, &old)?;
        cx.forget(&old)?;
    }
    let cur = inspect(rt, name)?;
    let mut owned = cx.store.state.owned_by_key(Shape::Container, name).cloned();
    // The host's record says it made a container at this name, but the one there now does not
    // carry the host's label: something else removed the host's and put its own in its place.
    // That one is found, not drift: held on an adopted node, never replaced as if it were ours.
    if let (Some(rec), Some(c)) = (&owned, &cur) {
        if c.labels.get(LABEL_ID).map(String::as_str) != Some(id) {
            cx.forget(rec)?;
            owned = None;
        }
    }
    let held = cx.store.state.held_at(id, name).cloned();
    let keep = cx.keeps_found(spec.module.as_deref());
    let record = Owned {
        id: id.to_string(),
        module: spec.module.clone(),
        shape: Shape::Container,
        key: name.to_string(),
        digest: Some(digest.clone()),
        found: false,
    };
    // A container carrying the host's labels for this very declaration is the host's own, made
    // by an apply that died before recording it; it is never "found".
    let ours = |c: &Container| {
        c.labels.get(LABEL_ID).map(String::as_str) == Some(id)
            && c.labels.get(LABEL_SPEC) == Some(&digest)
    };

    match (owned, cur) {
        (Some(_), None) => {
            create(cx, rt, spec, &digest, record)?;
            Ok(Done::new(Outcome::Created, "was missing; created again"))
        }
        (Some(rec), Some(c)) => converge(cx, rt, spec, &digest, record, Some(rec), c),
        (None, Some(c)) if ours(&c) => converge(cx, rt, spec, &digest, record, None, c),
        (None, None) => {
            if held.is_some() && keep {
                return Ok(Done::new(
                    Outcome::ChangedBySomethingElse,
                    "held container was removed by something else; not recreated",
                ));
            }
            create(cx, rt, spec, &digest, record)?;
            Ok(Done::new(Outcome::Created, "created and running"))
        }
        (None, Some(c)) => {
            // Found: a container at a declared name with no record of the host creating it.
            let now = fingerprint(&c);
            if keep {
                return match held {
                    Some(h) if h.digest.as_deref() != Some(now.as_str()) => Ok(Done::new(
                        Outcome::ChangedBySomethingElse,
                        format!(
                            "held container was {}; not restarted or reverted",
                            what_changed(h.digest.as_deref().unwrap_or(""), &c)
                        ),
                    )),
                    Some(_) => Ok(Done::new(
                        Outcome::Held,
                        format!("found {}; kept as it is", describe_found(&c)),
                    )),
                    None => {
                        cx.record_held(Held {
                            id: id.to_string(),
                            module: spec.module.clone(),
                            shape: Shape::Container,
                            key: name.to_string(),
                            digest: Some(now),
                        })?;
                        Ok(Done::new(
                            Outcome::Held,
                            format!("found {}; kept as it is", describe_found(&c)),
                        ))
                    }
                };
            }
            replace(cx, rt, spec, &digest, record)?;
            Ok(Done::new(
                Outcome::Changed,
                format!(
                    "found container {} replaced by the declared one",
                    describe_found(&c)
                ),
            ))
        }
    }
}

/// An owned container (or the host's own unrecorded one): unchanged, started again, or replaced.
fn converge(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    digest: &str,
    record: Owned,
    rec: Option<Owned>,
    c: Container,
) -> Result<Done, String> {
    let diffs = differences(&c, spec, digest);
    if !diffs.is_empty() {
        replace(cx, rt, spec, digest, record)?;
        return Ok(Done::new(
            Outcome::Changed,
            format!("differed ({}); replaced", diffs.join("; ")),
        ));
    }
    if !c.running {
        cx.intend(&record)?;
        rt.start(&spec.name)
            .map_err(|e| format!("starting container {}: {e}", spec.name))?;
        cx.changed(&spec.id);
        read_back(rt, spec, digest)?;
        cx.record_owned(record)?;
        return Ok(Done::new(
            Outcome::Changed,
            format!(
                "was {} (exit code {}); started again",
                c.status, c.exit_code
            ),
        ));
    }
    if rec.as_ref() != Some(&record) {
        cx.record_owned(record)?;
    }
    Ok(Done::new(
        Outcome::Unchanged,
        "matches the declaration and is running",
    ))
}

fn inspect(rt: &dyn ContainerRuntime, name: &str) -> Result<Option<Container>, String> {
    rt.inspect(name)
        .map_err(|e| format!("inspecting container {name}: {e}"))
}

fn create(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    digest: &str,
    record: Owned,
) -> Result<(), String> {
    cx.intend(&record)?;
    run_and_record(cx, rt, spec, digest, record)
}

/// Removes what is at the name (its record already says what the host is about to create), then
/// creates the declared container.
fn replace(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    digest: &str,
    record: Owned,
) -> Result<(), String> {
    cx.intend(&record)?;
    remove_and_check(cx, rt, &spec.name, &spec.id, " to replace it")?;
    run_and_record(cx, rt, spec, digest, record)
}

fn run_and_record(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    digest: &str,
    record: Owned,
) -> Result<(), String> {
    rt.run(&wanted(spec, digest))
        .map_err(|e| format!("creating container {}: {e}", spec.name))?;
    cx.changed(&spec.id);
    read_back(rt, spec, digest)?;
    cx.record_owned(record)
}

/// Inspects the container the host just made or started: it must match and be running.
fn read_back(rt: &dyn ContainerRuntime, spec: &ContainerSpec, digest: &str) -> Result<(), String> {
    let name = &spec.name;
    let c = inspect(rt, name)?
        .ok_or_else(|| format!("container {name} is missing right after it was created"))?;
    let diffs = differences(&c, spec, digest);
    if !diffs.is_empty() {
        return Err(format!(
            "container {name} does not read back as declared: {}",
            diffs.join("; ")
        ));
    }
    if !c.running {
        return Err(format!(
            "container {name} was started but is not running ({}, exit code {})",
            c.status, c.exit_code
        ));
    }
    Ok(())
}

/// Removes an undeclared container the host created. A container now at that name without the
/// host's label is somebody else's, and is left where it is.
pub(super) fn remove(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, String> {
    let rt = system::container_runtime(cx.runner)?;
    remove_with(cx, rt.as_ref(), rec)
}

pub(super) fn remove_with(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    rec: &Owned,
) -> Result<Done, String> {
    let name = rec.key.as_str();
    let Some(c) = inspect(rt, name)? else {
        return Ok(Done::new(
            Outcome::Removed,
            "no longer declared; already gone",
        ));
    };
    let by_host = c.labels.get(LABEL_ID) == Some(&rec.id)
        || (rec.digest.is_some() && c.labels.get(LABEL_SPEC) == rec.digest.as_ref());
    if rec.found || !by_host {
        return Ok(Done::new(
            Outcome::Forgotten,
            format!(
                "the container now at {name} ({}) is not one the host created; left in place",
                describe_found(&c)
            ),
        ));
    }
    remove_and_check(cx, rt, name, &rec.id, "")?;
    Ok(Done::new(Outcome::Removed, "no longer declared; removed"))
}

/// Removes the container at `name` and reads back that it is gone (a runtime that answers
/// "removed" while the container stays is a failure, never a removal).
fn remove_and_check(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    name: &str,
    id: &str,
    why: &str,
) -> Result<(), String> {
    rt.remove(name)
        .map_err(|e| format!("removing container {name}{why}: {e}"))?;
    cx.changed(id);
    if inspect(rt, name)?.is_some() {
        return Err(format!(
            "container {name} is still there after it was removed"
        ));
    }
    Ok(())
}

/// Whether an intent left by a host that died mid-apply was carried out: a container at the
/// record's name carrying the host's labels for it. Any doubt (no runtime, no answer) is "no".
pub(super) fn settled(runner: &dyn Runner, rec: &Owned) -> bool {
    let Ok(rt) = system::container_runtime(runner) else {
        return false;
    };
    matches!(
        rt.inspect(&rec.key),
        Ok(Some(c)) if c.labels.get(LABEL_ID) == Some(&rec.id)
            && c.labels.get(LABEL_SPEC) == rec.digest.as_ref()
    )
}

#[cfg(test)]
mod tests {
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

    fn apply(bed: &mut Bed, rt: &FakeRuntime, d: &Declaration) -> Result<Done, String> {
        apply_with(&mut bed.cx(d), rt, spec(d))
    }

    fn outcome(r: Result<Done, String>) -> (Outcome, String) {
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
        let e = apply(&mut bed, &rt, &d).err().expect("fails");
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
}
