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

use super::adopt::{self, Found, Kept, Records};
use super::{Cx, Done, Outcome, ResourceError};
use crate::declaration::{ContainerSpec, Declaration, PublishedPort, Shape};
use crate::store::{self, Owned, State};
use crate::system::{self, normalize_image, Container, ContainerRuntime, NewContainer};
use run::Runner;
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
pub(super) fn fingerprint(c: &Container) -> String {
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

pub(super) fn describe_found(c: &Container) -> String {
    format!(
        "{} (image {}, {})",
        short(&c.id),
        c.image,
        if c.running { "running" } else { &c.status }
    )
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &ContainerSpec) -> Result<Done, ResourceError> {
    let rt = system::container_runtime(cx.runner).map_err(ResourceError::Unavailable)?;
    apply_with(cx, rt.as_ref(), spec)
}

pub(super) fn apply_with(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
) -> Result<Done, ResourceError> {
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
) -> Result<Vec<String>, ResourceError> {
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
) -> Result<Done, ResourceError> {
    // The resource was renamed: the container the host made under the old name would otherwise
    // be orphaned, still holding its ports, since the new record replaces the old one.
    let renamed = cx
        .store
        .state
        .owned(&spec.id)
        .filter(|o| o.shape == Shape::Container && o.key != spec.name)
        .cloned();
    if let Some(old) = renamed {
        remove_with(cx, rt, &old)?;
        cx.forget(&old)?;
    }
    let r = read(rt, &cx.store.state, cx.decl, spec)?;
    execute(cx, rt, spec, decide(&r, spec))
}

/// What the container applier reads before it decides: the container at the declared name and
/// the store's records of that name.
pub(super) struct Reading {
    pub cur: Option<Container>,
    pub records: Records,
}

/// Reads what [`decide`] needs of `spec` through `rt` and the store's `state`; changes nothing.
pub(super) fn read(
    rt: &dyn ContainerRuntime,
    state: &State,
    decl: &Declaration,
    spec: &ContainerSpec,
) -> Result<Reading, ResourceError> {
    let keep = adopt::keeps_found(decl, spec.module.as_deref());
    Ok(Reading {
        cur: inspect(rt, &spec.name)?,
        records: Records::of(state, Shape::Container, &spec.id, &spec.name, keep),
    })
}

/// What the container applier does, decided from its [`Reading`] alone: `disown`, a record of
/// the host's that the container now at the name disowns (it does not carry the host's label:
/// something else removed the host's and put its own in its place), forgotten first; then `act`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decision {
    pub disown: Option<Owned>,
    pub act: Act,
}

/// What is done at the declared name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Act {
    /// Owned and missing: created again.
    Recreate,
    /// The host's own, and it differs (`diffs`): replaced.
    Replace { diffs: Vec<String> },
    /// The host's own, as declared, and not running (`was`, as inspected): started again.
    Start { was: Box<Container> },
    /// The host's own, as declared and running: `was`, its record, written again only if it
    /// changed.
    Unchanged { was: Option<Owned> },
    /// No record and nothing there: created.
    Create,
    /// Found, or held, on an adopted node: kept as it is (`found`: what is there now).
    Keep {
        kept: Kept,
        found: Option<Box<Container>>,
    },
    /// Found with no record and not kept: replaced by the declared one.
    ReplaceFound { found: Box<Container> },
}

/// The container applier's decision: pure, from what was read and what is declared.
pub(super) fn decide(r: &Reading, spec: &ContainerSpec) -> Decision {
    let id = spec.id.as_str();
    let digest = spec_digest(spec);
    let mut owned = r.records.owned.clone();
    let mut disown = None;
    if let (Some(_), Some(c)) = (&owned, &r.cur) {
        if c.labels.get(LABEL_ID).map(String::as_str) != Some(id) {
            disown = owned.take();
        }
    }
    // A container carrying the host's labels for this very declaration is the host's own, made
    // by an apply that died before recording it; it is never "found".
    let ours = |c: &Container| {
        c.labels.get(LABEL_ID).map(String::as_str) == Some(id)
            && c.labels.get(LABEL_SPEC) == Some(&digest)
    };
    let converge = |c: &Container, was: Option<Owned>| {
        let diffs = differences(c, spec, &digest);
        if !diffs.is_empty() {
            Act::Replace { diffs }
        } else if !c.running {
            Act::Start {
                was: Box::new(c.clone()),
            }
        } else {
            Act::Unchanged { was }
        }
    };
    let act = match (owned, &r.cur) {
        (Some(_), None) => Act::Recreate,
        (Some(rec), Some(c)) => converge(c, Some(rec)),
        (None, Some(c)) if ours(c) => converge(c, None),
        (None, cur) => match r.records.kept(cur.as_ref().map(fingerprint).as_deref()) {
            Some(kept) => Act::Keep {
                kept,
                found: cur.clone().map(Box::new),
            },
            None => match cur {
                None => Act::Create,
                Some(c) => Act::ReplaceFound {
                    found: Box::new(c.clone()),
                },
            },
        },
    };
    Decision { disown, act }
}

impl Act {
    /// The outcome the act reports for this decision.
    pub fn outcome(&self) -> Outcome {
        match self {
            Act::Recreate | Act::Create => Outcome::Created,
            Act::Replace { .. } | Act::Start { .. } | Act::ReplaceFound { .. } => Outcome::Changed,
            Act::Unchanged { .. } => Outcome::Unchanged,
            Act::Keep { kept, .. } => kept.outcome(),
        }
    }

    /// The preview's line for this decision: what the act would do.
    pub fn preview(&self, spec: &ContainerSpec) -> String {
        match self {
            Act::Recreate => "missing; would be created again".into(),
            Act::Replace { diffs } => format!("differs ({}); would be replaced", diffs.join("; ")),
            Act::Start { was } => format!("is {}; would be started again", was.status),
            Act::Unchanged { .. } => "matches the declaration and is running".into(),
            Act::Create => format!("would be created from {} and started", spec.image),
            Act::Keep { kept, found } => match (kept, found) {
                (_, None) => "held container was removed by something else; not recreated".into(),
                (Kept::Held, Some(c)) => {
                    format!("found {}; would be kept as it is", describe_found(c))
                }
                (_, Some(_)) => "held container changed by something else; not reverted".into(),
            },
            Act::ReplaceFound { found } => format!(
                "found container {} would be replaced by the declared one",
                describe_found(found)
            ),
        }
    }
}

/// Carries out a [`Decision`]: forgets a disowned record, then creates, replaces or starts the
/// container and reads it back, records, or keeps.
pub(super) fn execute(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    decision: Decision,
) -> Result<Done, ResourceError> {
    if let Some(rec) = &decision.disown {
        cx.forget(rec)?;
    }
    let digest = spec_digest(spec);
    let record = Owned {
        parents: Vec::new(),
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Container,
        key: spec.name.clone(),
        digest: Some(digest.clone()),
        found: false,
        stamp: None,
    };
    match decision.act {
        Act::Recreate => {
            create(cx, rt, spec, &digest, record)?;
            Ok(Done::new(Outcome::Created, "was missing; created again"))
        }
        Act::Replace { diffs } => {
            replace(cx, rt, spec, &digest, record)?;
            Ok(Done::new(
                Outcome::Changed,
                format!("differed ({}); replaced", diffs.join("; ")),
            ))
        }
        Act::Start { was } => {
            cx.intend(&record)?;
            rt.start(&spec.name).map_err(ResourceError::system(format!(
                "starting container {}",
                spec.name
            )))?;
            cx.changed(&spec.id);
            read_back(rt, spec, &digest)?;
            cx.record_owned(record)?;
            Ok(Done::new(
                Outcome::Changed,
                format!(
                    "was {} (exit code {}); started again",
                    was.status, was.exit_code
                ),
            ))
        }
        Act::Unchanged { was } => {
            cx.refresh_owned(record, was.as_ref())?;
            Ok(Done::new(
                Outcome::Unchanged,
                "matches the declaration and is running",
            ))
        }
        Act::Create => {
            create(cx, rt, spec, &digest, record)?;
            Ok(Done::new(Outcome::Created, "created and running"))
        }
        Act::Keep { kept, found } => {
            let at = Found {
                id: &spec.id,
                module: spec.module.as_deref(),
                shape: Shape::Container,
                key: &spec.name,
                now: found.as_deref().map(fingerprint),
                stamp: None,
            };
            adopt::settle(cx, &at, &kept)?;
            Ok(kept.done(|k| match (k, &found) {
                (_, None) => "held container was removed by something else; not recreated".into(),
                (Kept::Changed { was }, Some(c)) => format!(
                    "held container was {}; not restarted or reverted",
                    what_changed(was, c)
                ),
                (_, Some(c)) => format!("found {}; kept as it is", describe_found(c)),
            }))
        }
        Act::ReplaceFound { found } => {
            replace(cx, rt, spec, &digest, record)?;
            Ok(Done::new(
                Outcome::Changed,
                format!(
                    "found container {} replaced by the declared one",
                    describe_found(&found)
                ),
            ))
        }
    }
}

pub(super) fn inspect(
    rt: &dyn ContainerRuntime,
    name: &str,
) -> Result<Option<Container>, ResourceError> {
    rt.inspect(name).map_err(ResourceError::system(format!(
        "inspecting container {name}"
    )))
}

fn create(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    digest: &str,
    record: Owned,
) -> Result<(), ResourceError> {
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
) -> Result<(), ResourceError> {
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
) -> Result<(), ResourceError> {
    rt.run(&wanted(spec, digest))
        .map_err(ResourceError::system(format!(
            "creating container {}",
            spec.name
        )))?;
    cx.changed(&spec.id);
    read_back(rt, spec, digest)?;
    Ok(cx.record_owned(record)?)
}

/// Inspects the container the host just made or started: it must match and be running.
fn read_back(
    rt: &dyn ContainerRuntime,
    spec: &ContainerSpec,
    digest: &str,
) -> Result<(), ResourceError> {
    let name = &spec.name;
    let c = inspect(rt, name)?.ok_or_else(|| {
        ResourceError::NotAsDeclared(format!(
            "container {name} is missing right after it was created"
        ))
    })?;
    let diffs = differences(&c, spec, digest);
    if !diffs.is_empty() {
        return Err(ResourceError::NotAsDeclared(format!(
            "container {name} does not read back as declared: {}",
            diffs.join("; ")
        )));
    }
    if !c.running {
        return Err(ResourceError::NotAsDeclared(format!(
            "container {name} was started but is not running ({}, exit code {})",
            c.status, c.exit_code
        )));
    }
    Ok(())
}

/// Whose record asks for a container's removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    /// The store's own record of a container the host created.
    Owned,
    /// A record the mesh recovered for a lost store: removed only while the container at its
    /// name is still the one it describes (that id and that spec, by its labels).
    Recovered,
}

/// Removes an undeclared container the host created. A container now at that name without the
/// host's label is somebody else's, and is left where it is.
pub(super) fn remove(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    let rt = system::container_runtime(cx.runner).map_err(ResourceError::Unavailable)?;
    remove_with(cx, rt.as_ref(), rec)
}

pub(super) fn remove_with(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    rec: &Owned,
) -> Result<Done, ResourceError> {
    remove_asked(cx, rt, rec, Asked::Owned)
}

/// Removes the container that a record the mesh recovered for a lost store names, only while the
/// one at its name is still that one: created by the host for that id, from that spec (its
/// labels). A container recreated by someone else is left in place and reported.
pub(super) fn remove_recovered(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    let rt = system::container_runtime(cx.runner).map_err(ResourceError::Unavailable)?;
    remove_asked(cx, rt.as_ref(), rec, Asked::Recovered)
}

/// What the container applier does with a record no longer declared, decided from the
/// container at its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Removal {
    /// Nothing is at its name: already gone.
    Gone,
    /// What is at its name is not the host's as asked (`found`): left in place.
    Leave { found: Box<Container> },
    /// What is at its name is the host's as asked: removed.
    Remove,
}

/// The container applier's decision for `rec`, no longer declared, with `cur` at its name: pure.
/// A container is the host's own when it carries the host's labels for the record (its id, or
/// the digest of its spec; a recovered record needs both) and the host did not merely find it.
pub(super) fn decide_removal(cur: Option<&Container>, rec: &Owned, asked: Asked) -> Removal {
    let Some(c) = cur else {
        return Removal::Gone;
    };
    let by_id = c.labels.get(LABEL_ID) == Some(&rec.id);
    let by_spec = rec.digest.is_some() && c.labels.get(LABEL_SPEC) == rec.digest.as_ref();
    let ours = match asked {
        Asked::Owned => !rec.found && (by_id || by_spec),
        Asked::Recovered => by_id && by_spec,
    };
    if ours {
        Removal::Remove
    } else {
        Removal::Leave {
            found: Box::new(c.clone()),
        }
    }
}

impl Removal {
    /// The outcome the act reports for this decision of an owned record's removal, and the
    /// preview's line for it.
    pub fn preview(&self) -> (Outcome, String) {
        match self {
            Removal::Gone => (Outcome::Removed, "no longer declared; already gone".into()),
            Removal::Leave { .. } => (
                Outcome::Forgotten,
                "not one the host created; would be left in place".into(),
            ),
            Removal::Remove => (
                Outcome::Removed,
                "no longer declared; would be removed".into(),
            ),
        }
    }
}

/// Removes the container `rec` names if the one at its name is the host's as `asked` requires.
pub(super) fn remove_asked(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    rec: &Owned,
    asked: Asked,
) -> Result<Done, ResourceError> {
    let name = rec.key.as_str();
    let cur = inspect(rt, name)?;
    let (left, not_ours, removed) = match asked {
        Asked::Owned => (
            Outcome::Forgotten,
            "is not one the host created",
            "no longer declared; removed",
        ),
        Asked::Recovered => (
            Outcome::ChangedBySomethingElse,
            "is not the one the recovered record describes",
            "no longer declared; removed, as the recovered record describes it",
        ),
    };
    match decide_removal(cur.as_ref(), rec, asked) {
        Removal::Gone => Ok(Done::new(
            Outcome::Removed,
            "no longer declared; already gone",
        )),
        Removal::Leave { found } => Ok(Done::new(
            left,
            format!(
                "the container now at {name} ({}) {not_ours}; left in place",
                describe_found(&found)
            ),
        )),
        Removal::Remove => {
            remove_and_check(cx, rt, name, &rec.id, "")?;
            Ok(Done::new(Outcome::Removed, removed))
        }
    }
}

/// Removes the container at `name` and reads back that it is gone (a runtime that answers
/// "removed" while the container stays is a failure, never a removal).
fn remove_and_check(
    cx: &mut Cx<'_>,
    rt: &dyn ContainerRuntime,
    name: &str,
    id: &str,
    why: &str,
) -> Result<(), ResourceError> {
    rt.remove(name).map_err(ResourceError::system(format!(
        "removing container {name}{why}"
    )))?;
    cx.changed(id);
    if inspect(rt, name)?.is_some() {
        return Err(ResourceError::NotAsDeclared(format!(
            "container {name} is still there after it was removed"
        )));
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
mod tests;
