//! Scenarios 1 to 6: genesis on a machine in use, the node adopted, nothing that serves changed,
//! the store guarded, the mesh through reloads and a reboot, a predecessor still writing caught.

use serde_json::json;

use super::*;

/// The names of the running containers.
fn running(cx: &Ctx) -> Vec<String> {
    let out = cx
        .bed
        .docker
        .docker(&["ps", "--format", "{{.Names}}"])
        .expect("docker ps");
    let mut names: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    names.sort();
    names
}

/// The lines a refused genesis named.
fn refused(out: &lab::Output) -> Vec<String> {
    assert_eq!(
        out.status.code(),
        Some(3),
        "genesis must refuse (exit 3):\n{}",
        shown(out)
    );
    json_of(out)["refused"]["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no refused list:\n{}", shown(out)))
        .iter()
        .map(|l| l.as_str().unwrap_or("").to_string())
        .collect()
}

/// The host ports a container publishes, as `HOST->CONTAINER/PROTO`.
fn published(cx: &Ctx, name: &str) -> Vec<String> {
    let out = cx
        .bed
        .docker
        .docker(&["container", "inspect", name])
        .unwrap_or_else(|e| panic!("inspecting {name}: {e}"));
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let mut ports = Vec::new();
    for (spec, bindings) in v[0]["HostConfig"]["PortBindings"]
        .as_object()
        .into_iter()
        .flatten()
    {
        for b in bindings.as_array().into_iter().flatten() {
            ports.push(format!("{}->{spec}", b["HostPort"].as_str().unwrap_or("?")));
        }
    }
    ports
}

/// Scenario 1: Genesis converged on a machine in use refuses and names every container and every listener
/// it counted (all but ssh's and loopback's), and changes nothing.
pub(super) fn genesis_converged_refuses(cx: &Ctx) {
    let root = tempfile::tempdir().expect("a root for the refused raise");
    let before = running(cx);
    let inventory = cx.json(&["inventory", "--json"]);
    // Behind what the found firewall's kind needs to be seen (firewalld's bus, ufw's files).
    let prefix = cx.bed.prefix();
    let mut argv: Vec<&str> = prefix.iter().map(String::as_str).collect();
    argv.extend([MESH, "--root", root.path().to_str().unwrap()]);
    argv.extend([
        "genesis",
        "--node",
        NODE,
        "--bundle",
        cx.bundle.to_str().unwrap(),
        "--json",
    ]);
    let mut cmd = cx.node().command(&argv);
    cmd.env("DOCKER_HOST", cx.bed.docker.docker_host());
    let out = lab::run(&mut cmd).expect("running mesh-host genesis");
    let lines = refused(&out);
    let text = lines.join("\n");
    for name in &before {
        assert!(
            text.contains(&format!("container {name} (")),
            "container {name} not named:\n{text}"
        );
    }
    let mut counted = 0;
    for l in inventory["listeners"].as_array().into_iter().flatten() {
        let port = l["port"].as_u64().unwrap_or(0);
        let address: IpAddr = l["address"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("a listener without an address: {l}"));
        if address.is_loopback() || port == u64::from(ports::SSH) {
            continue;
        }
        counted += 1;
        assert!(
            text.contains(&format!(":{port} is listened on")),
            "listener {address}:{port} not named:\n{text}"
        );
    }
    assert!(
        counted > 0,
        "the inventory counted no listener: {inventory:#}"
    );
    assert!(
        !text.contains(&format!(":{} is listened on", ports::SSH)),
        "ssh counted:\n{text}"
    );
    assert!(
        !root.path().join("var/lib/mesh-host").exists(),
        "a refused genesis made a store"
    );
    assert_eq!(
        running(cx),
        before,
        "a refused genesis changed the containers"
    );
}

/// Scenario 2: Genesis adopted with the registry's port held refuses naming the holder; with another port
/// given the foundation comes up there, and adopting the foundation as modules leaves it there.
pub(super) fn genesis_adopted(cx: &mut Ctx) {
    let bundle = cx.bundle.to_str().unwrap().to_owned();
    let base = [
        "genesis",
        "--adopted",
        "--node",
        NODE,
        "--bundle",
        &bundle,
        "--json",
    ];
    let held = cx.mesh(&base);
    let lines = refused(&held);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("tcp/{}", ports::REGISTRY))
                && l.contains(&format!("container {}", lab::OLD_REGISTRY))),
        "the held registry port not named with its holder: {lines:?}"
    );
    assert!(
        !cx.bed.path("var/lib/mesh-host").exists(),
        "a refused genesis made a store"
    );

    let given = format!("registry={}", ports::REGISTRY_GIVEN);
    let mut args = base.to_vec();
    args.extend(["--ports", &given]);
    let raised = cx.mesh(&args);
    assert_eq!(
        raised.status.code(),
        Some(0),
        "the adopted raise:\n{}",
        shown(&raised)
    );
    let report = json_of(&raised);
    assert_nothing_failed(&report);
    for id in ["store/container", "broker/container", "registry/container"] {
        assert_eq!(outcome(&report, id), "created", "{id}: {report:#}");
    }
    let registry = format!("{}->{}/tcp", ports::REGISTRY_GIVEN, ports::REGISTRY);
    assert_eq!(
        published(cx, "mesh-registry"),
        std::slice::from_ref(&registry)
    );
    reached(
        &cx.bed,
        &cx.bed.net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::REGISTRY_GIVEN,
        "the foundation's registry on the port given",
    );

    // The foundation adopted as modules: its stored declaration with its modules taken.
    let state: Value = serde_json::from_slice(
        &std::fs::read(cx.bed.path("var/lib/mesh-host/state.json")).expect("the store"),
    )
    .expect("the store is JSON");
    let mut decl = state["declaration"].clone();
    decl["taken"] = json!(["store", "broker", "registry"]);
    let file = cx.bed.path("foundation-as-modules.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();
    let again = cx.json(&[
        "apply",
        file.to_str().unwrap(),
        "--source",
        "bundle",
        "--json",
    ]);
    assert_nothing_failed(&again);
    assert_eq!(
        outcome(&again, "registry/container"),
        "unchanged",
        "{again:#}"
    );
    assert_eq!(published(cx, "mesh-registry"), [registry]);
    assert_eq!(
        cx.json(&["owned", "--json"])["taken"],
        json!(["store", "broker", "registry"])
    );
    // From here the node runs its resident host, as its unit would.
    cx.ensure_resident();
}

/// The operator assigns the bed's modules on the adopted node: the stored declaration with the
/// service's module and the file module added. Returns the apply's report.
pub(super) fn assign_modules(cx: &Ctx) -> Value {
    let state: Value = serde_json::from_slice(
        &std::fs::read(cx.bed.path("var/lib/mesh-host/state.json")).expect("the store"),
    )
    .expect("the store is JSON");
    let mut decl = state["declaration"].clone();
    let resources = decl["resources"].as_array_mut().expect("resources");
    for r in lab::module_resources() {
        if !resources.iter().any(|x| x["id"] == r["id"]) {
            resources.push(r);
        }
    }
    let file = cx.bed.path("assigned.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();
    let report = cx.json(&["apply", file.to_str().unwrap(), "--json"]);
    assert_nothing_failed(&report);
    report
}

/// Scenario 3: Nothing that serves changed: the service reachable from the second machine, the file byte
/// for byte, the found firewall's rules differing only by the mesh's marked rules.
pub(super) fn nothing_that_serves_changed(cx: &Ctx) {
    let report = assign_modules(cx);
    for id in ["web/container", "web/config", "site/motd"] {
        let got = outcome(&report, id);
        assert!(
            got == "held" || got == "unchanged",
            "{id} must be held, was {got}: {report:#}"
        );
    }
    let net = &cx.bed.net;
    reached(
        &cx.bed,
        &net.peer,
        &[NODE_PRIVATE_V4.into(), NODE_PUBLIC_V4.into()],
        ports::SERVED,
        "the predecessor's service from the second machine",
    );
    let now = std::fs::read(cx.bed.path(lab::HELD_FILE)).expect("the held file");
    assert!(
        now == cx.held_before,
        "the held file changed: was {:?}, now {:?}",
        String::from_utf8_lossy(&cx.held_before),
        String::from_utf8_lossy(&now)
    );
    let found = cx.bed.found_rules().expect("reading the found firewall");
    assert_eq!(
        without_marked(&found),
        without_marked(&cx.found_before),
        "the found firewall changed beyond the mesh's marked rules"
    );
    assert!(
        found.lines().any(is_marked),
        "no rule marked as the mesh's in the found firewall:\n{found}"
    );
    assert_eq!(
        cx.bed.found_file_bytes().unwrap(),
        cx.found_files_before,
        "the found firewall's files changed"
    );
}

/// Scenario 4: The store is unreachable from outside, before and after the found firewall is reloaded, and
/// reachable over the private network and from a container on the node; the bus from anywhere.
pub(super) fn store_unreachable_from_outside(cx: &mut Ctx) {
    cx.ensure_resident();
    let net = cx.bed.net.clone();
    not_reached(
        &net.outside,
        &public(),
        ports::STORE,
        "the store from outside",
    );
    reached(
        &cx.bed,
        &net.peer,
        &[NODE_PRIVATE_V4.into()],
        ports::STORE,
        "the store over the private network",
    );
    let fetched = cx
        .bed
        .fetch_from_container(NODE_PUBLIC_V4.into(), ports::STORE)
        .expect("a container on the node");
    assert!(
        fetched.success() && fetched.stdout.starts_with("HTTP/"),
        "the store from a container on the node:\n{}",
        shown(&fetched)
    );
    reached(
        &cx.bed,
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::BUS,
        "the bus from a machine that has not enrolled",
    );

    cx.bed.reload_found().expect("reloading the found firewall");
    // The resident host puts the guard back within milliseconds; a probe a moment later.
    std::thread::sleep(Duration::from_millis(300));
    not_reached(
        &net.outside,
        &public(),
        ports::STORE,
        "the store from outside after the found firewall's reload",
    );
    // A reload takes the runtime's rules with it (all of them under `flush ruleset`, its filter
    // chains under `*-restore`); the operator restarts the runtime, as on any such machine.
    cx.bed
        .restart_runtime()
        .expect("restarting the container runtime");
    not_reached(
        &net.outside,
        &public(),
        ports::STORE,
        "the store from outside after the runtime's restart",
    );
    reached(
        &cx.bed,
        &net.peer,
        &[NODE_PRIVATE_V4.into()],
        ports::STORE,
        "the store over the private network after the reload",
    );
}

/// What "the mesh works" means on the bed: every opening in force, the hub's port reached from
/// anywhere through the found firewall's incoming drop, the bus from outside and the store over
/// the private network, and the store still unreachable from outside.
fn mesh_works(cx: &Ctx, when: &str) {
    cx.openings_in_force(when);
    let net = &cx.bed.net;
    for addr in public() {
        let got = net
            .outside
            .probe_udp(addr, ports::HUB, ANSWER)
            .unwrap_or_else(|e| panic!("udp probe of the hub: {e}"));
        assert_eq!(
            got,
            Probe::Reached,
            "{when}: the hub's port from outside on {addr}"
        );
    }
    reached(
        &cx.bed,
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        ports::BUS,
        &format!("{when}: the bus from outside"),
    );
    reached(
        &cx.bed,
        &net.peer,
        &[NODE_PRIVATE_V4.into()],
        ports::STORE,
        &format!("{when}: the store over the private network"),
    );
    not_reached(
        &net.outside,
        &public(),
        ports::STORE,
        &format!("{when}: the store from outside"),
    );
}

/// Scenario 5: The mesh works through the found firewall, after it is reloaded, and after the machine
/// "reboots": the resident host stopped, the runtime stopped, every table gone, the found
/// firewall loaded from its files, the runtime started, the resident host started.
pub(super) fn through_reload_and_reboot(cx: &mut Ctx) {
    cx.ensure_resident();
    if cx.hub.is_none() {
        cx.hub = Some(
            cx.node()
                .listen_udp(ports::HUB)
                .expect("a UDP echo standing in for the hub"),
        );
    }
    mesh_works(cx, "adopted");

    cx.bed.reload_found().expect("reloading the found firewall");
    cx.openings_in_force("after the found firewall's reload");
    cx.bed
        .restart_runtime()
        .expect("restarting the container runtime");
    mesh_works(cx, "after the found firewall's reload");

    cx.stop_resident();
    cx.bed.power_cycle().expect("the machine's power cycle");
    cx.ensure_resident();
    mesh_works(cx, "after the reboot");
    let found = cx.bed.found_rules().expect("reading the found firewall");
    assert_eq!(
        without_marked(&found),
        without_marked(&cx.found_before),
        "after the reboot the found firewall is not what its files say"
    );
}

/// Scenario 6: With the stand-in for the predecessor's control writing again, the held file's change is
/// reported as changed by something else and not reverted.
pub(super) fn predecessor_still_writing(cx: &Ctx) {
    let path = cx.bed.path(lab::HELD_FILE);
    cx.bed.start_stand_in().expect("starting the stand-in");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read(&path).ok().as_deref() == Some(&cx.held_before[..]) {
        assert!(
            Instant::now() < deadline,
            "the stand-in never wrote the file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let report = cx.json(&["reconcile", "--json"]);
    cx.bed.stop_stand_in();
    let entry = report["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["id"] == "web/config"));
    assert_eq!(
        outcome(&report, "web/config"),
        "changed-by-something-else",
        "the held file's entry: {entry:?}\nthe file was {:?} at adoption, is {:?} now\n{report:#}",
        String::from_utf8_lossy(&cx.held_before),
        std::fs::read_to_string(&path).unwrap_or_default(),
    );
    let now = std::fs::read_to_string(&path).expect("the held file");
    assert!(
        now.starts_with("written by the predecessor's control, pass "),
        "the held file was reverted or replaced: {now:?}"
    );
    let briefing = cx.mesh(&["briefing"]);
    assert!(
        briefing.stdout.contains(lab::HELD_FILE),
        "the briefing does not name the held file:\n{}",
        shown(&briefing)
    );
}
