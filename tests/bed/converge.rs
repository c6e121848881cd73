//! Scenarios 7 and 8: a module assigned holds what it finds and taking it cuts over; converging
//! is previewed, refused while a found container is held, then flips to the derived filter with
//! the found firewall disabled, and returns. They drive issue 11's commands (`take`, `converge
//! --preview`, `converge`, `adopt`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;

/// The ids the store holds.
fn held_ids(cx: &Ctx) -> Vec<String> {
    cx.json(&["owned", "--json"])["held"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["id"].as_str().map(str::to_owned))
        .collect()
}

/// The `mesh-host.id` label of a container, if it has one (the host's evidence it made it).
fn host_label(cx: &Ctx, name: &str) -> Option<String> {
    let out = cx
        .bed
        .docker
        .docker(&[
            "container",
            "inspect",
            "--format",
            "{{index .Config.Labels \"mesh-host.id\"}}",
            name,
        ])
        .unwrap_or_else(|e| panic!("inspecting {name}: {e}"));
    let id = out.stdout.trim();
    (!id.is_empty() && id != "<no value>").then(|| id.to_owned())
}

/// The mesh's own table as nft lists it (the guard while adopted, the derived filter once
/// converged).
fn mesh_table(cx: &Ctx) -> String {
    cx.node()
        .run_ok(&["nft", "list", "table", "inet", "mesh_host"])
        .unwrap_or_else(|e| panic!("listing the mesh's table: {e}"))
        .stdout
}

/// The first half of scenario 8, run while the service's module still holds its found container:
/// the preview says the flip is refused, naming it, and the flip refuses and changes nothing.
pub(super) fn refused_while_held(cx: &Ctx) {
    assert!(
        held_ids(cx).contains(&"web/container".to_owned()),
        "the service's module does not hold its found container"
    );
    let tables = nft_tables(cx.node());
    let found = cx.bed.found_rules().expect("the found firewall");
    let preview = cx.mesh_converge(&["converge", "--preview", "--json"]);
    assert_eq!(
        preview.status.code(),
        Some(3),
        "the preview must say refused:\n{}",
        shown(&preview)
    );
    let refusals = json_of(&preview)["refusals"].to_string();
    assert!(
        refusals.contains(lab::SERVICE_MODULE),
        "the refusal does not name the module {}: {refusals}",
        lab::SERVICE_MODULE
    );
    let flip = cx.mesh_converge(&["converge", "--json"]);
    assert_eq!(
        flip.status.code(),
        Some(3),
        "the flip must be refused:\n{}",
        shown(&flip)
    );
    assert_eq!(
        nft_tables(cx.node()),
        tables,
        "a refused flip changed the tables"
    );
    assert_eq!(
        cx.bed.found_rules().unwrap(),
        found,
        "a refused flip changed the found firewall"
    );
    assert_eq!(
        host_label(cx, lab::SERVICE_MODULE),
        None,
        "a refused flip replaced the container"
    );
}

/// Scenario 7: The assigned module holds the found container and file; taken, it replaces them (the
/// original kept) and its port is opened.
pub(super) fn assigning_prepares_taking_cuts_over(cx: &Ctx) {
    let held = held_ids(cx);
    for id in ["web/container", "web/config"] {
        assert!(held.contains(&id.to_owned()), "{id} is not held: {held:?}");
    }
    assert_eq!(
        host_label(cx, lab::SERVICE_MODULE),
        None,
        "the found container was replaced before the take"
    );

    let take = cx.mesh_converge(&["take", lab::SERVICE_MODULE, "--json"]);
    assert_eq!(
        take.status.code(),
        Some(0),
        "take {}:\n{}",
        lab::SERVICE_MODULE,
        shown(&take)
    );
    assert_eq!(
        host_label(cx, lab::SERVICE_MODULE).as_deref(),
        Some("web/container"),
        "the taken module's container is not the host's"
    );
    let content = std::fs::read_to_string(cx.bed.path(lab::HELD_FILE)).expect("the module's file");
    assert_eq!(
        content, "written by the mesh\n",
        "the taken module's file was not replaced"
    );
    let owned = cx.json(&["owned", "--json"]);
    let originals = owned["originals"].to_string();
    assert!(
        originals.contains(lab::HELD_FILE),
        "the original of {} was not kept: {owned:#}",
        lab::HELD_FILE
    );
    let held = held_ids(cx);
    assert!(
        !held.iter().any(|h| h.starts_with("web/")),
        "the taken module still holds: {held:?}"
    );
    assert!(
        owned["taken"].to_string().contains(lab::SERVICE_MODULE),
        "the module is not recorded taken: {owned:#}"
    );
    let status = cx.openings_in_force("after the take");
    assert!(
        status["openings"].to_string().contains("web/http"),
        "the module's opening is not declared: {status:#}"
    );
    let net = &cx.bed.net;
    reached(
        &cx.bed,
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::SERVED,
        "the taken module's port from outside",
    );
    reached(
        &cx.bed,
        &net.peer,
        &[NODE_PRIVATE_V4.into()],
        ports::SERVED,
        "the taken module's port from the second machine",
    );
}

/// The preview's item for a port, from its `listening` and `published` arrays.
fn item(preview: &Value, port: u16) -> Option<Value> {
    ["listening", "published"]
        .iter()
        .flat_map(|k| preview[*k].as_array().cloned().unwrap_or_default())
        .find(|i| i["port"] == u64::from(port))
}

/// Scenario 8: Converging previews, then changes, then returns (its refusal while held is checked before
/// scenario 7's take).
pub(super) fn previews_flips_returns(cx: &mut Ctx) {
    match cx.refused_while_held.take() {
        Some(Err(why)) => panic!("while the module held its container: {why}"),
        None => panic!("the refusal while held was never checked"),
        Some(Ok(())) => {}
    }
    let net = cx.bed.net.clone();
    reached(
        &cx.bed,
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::UNDECLARED,
        "the undeclared published port before the flip",
    );

    let preview = cx.mesh_converge(&["converge", "--preview", "--json"]);
    assert_eq!(
        preview.status.code(),
        Some(4),
        "the preview must let the flip go ahead (changes pending):\n{}",
        shown(&preview)
    );
    let p = json_of(&preview);
    let served = item(&p, ports::SERVED)
        .unwrap_or_else(|| panic!("the preview does not name port {}: {p:#}", ports::SERVED));
    assert!(
        served["admitted_by"].as_str().is_some() && served["closes"] == false,
        "port {} must stay, admitted by its module's opening: {served}",
        ports::SERVED
    );
    let undeclared = item(&p, ports::UNDECLARED).unwrap_or_else(|| {
        panic!(
            "the preview does not name port {}: {p:#}",
            ports::UNDECLARED
        )
    });
    assert!(
        undeclared["admitted_by"].is_null() && undeclared["closes"] == true,
        "port {} must close: {undeclared}",
        ports::UNDECLARED
    );
    let take = p["take"].to_string();
    assert!(
        take.contains(lab::FILE_MODULE) && take.contains(lab::FILE_MODULE_FILE),
        "the preview does not name the module {} and its held file: {take}",
        lab::FILE_MODULE
    );
    assert!(
        !p["found_firewall"].is_null(),
        "the preview does not say which firewall is disabled: {p:#}"
    );

    // A probe loop against the store from outside, through the flip and the return; the first
    // connection that is answered is kept with the step under way and the node's ruleset then.
    let watch = Watch::default();
    let looper = {
        let (watch, outside, node) = (watch.clone(), net.outside.clone(), cx.node().clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            while !watch.stop.load(Ordering::Relaxed) {
                let got = outside
                    .probe_tcp(
                        NODE_PUBLIC_V4.into(),
                        ports::STORE,
                        Duration::from_millis(200),
                    )
                    .ok();
                if got == Some(Probe::Reached)
                    && watch.breaches.fetch_add(1, Ordering::Relaxed) == 0
                {
                    let ruleset = node
                        .run(&["nft", "list", "ruleset"])
                        .map(|o| o.stdout)
                        .unwrap_or_else(|e| format!("(nft list ruleset: {e})"));
                    let step = *lock(&watch.step);
                    *lock(&watch.first) = Some(format!(
                        "first {step} ({:.1} s into the loop); the node's ruleset then:\n{ruleset}",
                        started.elapsed().as_secs_f64()
                    ));
                }
            }
        })
    };
    let result = attempt(|| flip_and_return(cx, &watch));
    watch.stop.store(true, Ordering::Relaxed);
    let _ = looper.join();
    if let Err(why) = result {
        panic!(
            "{why}\n--- the resident host's log, last lines:\n{}",
            cx.resident_log()
        );
    }
    let breaches = watch.breaches.load(Ordering::Relaxed);
    assert!(
        breaches == 0,
        "the store was reached from outside {breaches} time(s), {}\n--- the resident host's log, last lines:\n{}",
        lock(&watch.first).clone().unwrap_or_default(),
        cx.resident_log()
    );
}

/// What the probe loop shares with the steps it watches.
#[derive(Clone, Default)]
struct Watch {
    stop: Arc<AtomicBool>,
    breaches: Arc<AtomicUsize>,
    step: Arc<Mutex<&'static str>>,
    first: Arc<Mutex<Option<String>>>,
}

impl Watch {
    fn step(&self, step: &'static str) {
        *lock(&self.step) = step;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn flip_and_return(cx: &Ctx, watch: &Watch) {
    watch.step("before the flip");
    let net = &cx.bed.net;
    let tables = nft_tables(cx.node());
    let found = cx.bed.found_rules().expect("the found firewall");
    let files = cx.bed.found_file_bytes().unwrap();

    watch.step("while mesh-host converge ran");
    let flip = cx.mesh_converge(&["converge", "--json"]);
    watch.step("after the flip, while converged");
    assert_eq!(flip.status.code(), Some(0), "the flip:\n{}", shown(&flip));
    let mesh = mesh_table(cx);
    assert!(
        mesh.contains("hook input")
            && mesh.contains("hook forward")
            && mesh.contains("policy drop"),
        "no derived filter was loaded in the mesh's table:\n{mesh}"
    );
    // In place of the guard, and still so a moment later, the resident host running.
    std::thread::sleep(Duration::from_secs(2));
    let mesh = mesh_table(cx);
    assert!(
        !mesh.contains("chain guard") && mesh.contains("policy drop"),
        "the derived filter is not in place of the guard two seconds after the flip:\n{mesh}"
    );
    let after = cx.bed.found_rules().unwrap();
    let admits = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !is_marked(l) && l.contains(&ports::SERVED.to_string()))
            .map(str::to_owned)
            .collect()
    };
    let still: Vec<String> = admits(&after)
        .into_iter()
        .filter(|l| admits(&found).contains(l))
        .collect();
    assert!(
        still.is_empty(),
        "the found firewall still admits the served port after the flip: {still:?}"
    );
    assert_eq!(
        cx.bed.found_file_bytes().unwrap(),
        files,
        "the found firewall's files changed on the flip"
    );
    let unit = cx.bed.boot_unit();
    assert_eq!(
        cx.bed.units().enabled(unit),
        Some(false),
        "the found firewall's boot unit {unit} is not disabled after the flip (calls: {:?})",
        cx.bed.units().calls()
    );
    assert!(
        cx.json(&["owned", "--json"])["taken"]
            .to_string()
            .contains(lab::FILE_MODULE),
        "the flip did not take {}",
        lab::FILE_MODULE
    );
    reached(
        &cx.bed,
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::SERVED,
        "the declared port after the flip",
    );
    not_reached(
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::UNDECLARED,
        "the undeclared published port after the flip",
    );
    not_reached(
        &net.outside,
        &public(),
        ports::STORE,
        "the store from outside after the flip",
    );

    watch.step("while mesh-host adopt ran");
    let back = cx.mesh_converge(&["adopt", "--json"]);
    watch.step("after the return, while adopted");
    assert_eq!(back.status.code(), Some(0), "the return:\n{}", shown(&back));
    assert_eq!(
        nft_tables(cx.node()),
        tables,
        "the node's tables after the return are not those before the flip"
    );
    // Gone when the return is done, and still gone a moment later: the resident host, which saw
    // the node converged until now, must not put it back.
    for when in ["when the return is done", "two seconds after the return"] {
        let mesh = mesh_table(cx);
        // The derived filter's chains are `input` and `forward` with policy drop; the guard's
        // own chains (`guard`, `guard_input`, `guard_forward`, policy accept) stay.
        assert!(
            !mesh.contains("policy drop")
                && !mesh.contains("chain input {")
                && !mesh.contains("chain forward {"),
            "the derived filter is not gone {when}:\n{mesh}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let restored = cx.bed.found_rules().unwrap();
    assert_eq!(
        without_marked(&restored),
        without_marked(&found),
        "the found firewall is not back as it was"
    );
    assert_eq!(
        cx.bed.found_file_bytes().unwrap(),
        files,
        "the found firewall's files changed on the return"
    );
    assert_eq!(
        cx.bed.units().enabled(unit),
        Some(true),
        "the found firewall's boot unit {unit} is not enabled again after the return"
    );
    // A unit whose daemon the flip ended (firewalld's) is started again on the return, as its
    // unit would start it; no unit is ever stopped, and no other is started.
    let calls = cx.bed.units().calls();
    let started = format!("start {unit}");
    let starts = cx.bed.unit_started_on_return();
    assert!(
        !calls.iter().any(|c| c.starts_with("stop")
            || (c.starts_with("start") && !(starts && *c == started))),
        "the found firewall's unit was stopped or started, where it must only be disabled and enabled{}: {calls:?}",
        if starts { " (and started on the return)" } else { "" }
    );
    if starts {
        assert!(
            calls.contains(&started),
            "{unit} was not started on the return, its daemon ended by the flip: {calls:?}"
        );
    }
    cx.openings_in_force("after the return");
    reached(
        &cx.bed,
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::UNDECLARED,
        "the undeclared published port after the return",
    );
    not_reached(
        &net.outside,
        &public(),
        ports::STORE,
        "the store from outside after the return",
    );
}
