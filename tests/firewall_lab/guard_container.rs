//! The guard and a containerised store on Docker 20.10: a machine outside that routes a packet
//! straight to the container's address and its own port (the node as its gateway), not to the
//! published host port, is refused too; the private network still reaches the store.

use super::*;

/// The store's host port in the node's settings, and the port it listens on in its container.
const STORE_HOST: u16 = 15432;
const STORE_CONTAINER: u16 = 5432;

/// The adopted declaration with the store published at [`STORE_HOST`]; with `declared`, the
/// store's container as a resource (module `store`, not taken: the found one is held).
fn store_declaration(declared: bool) -> Value {
    let resources = if declared {
        vec![json!({
            "id": "store/db",
            "type": "container",
            "module": "store",
            "name": "store",
            "image": lab::BUSYBOX_IMAGE,
            "ports": [{"host_port": STORE_HOST, "container_port": STORE_CONTAINER, "proto": "tcp"}],
        })]
    } else {
        vec![]
    };
    let mut decl = declaration(&resources);
    decl["settings"]["ports"]["store"] = json!(STORE_HOST);
    decl
}

#[test]
fn the_guard_refuses_a_stores_container_port_routed_to_from_outside() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let version = docker
        .docker(&["version", "--format", "{{.Server.Version}}"])
        .expect("docker version")
        .stdout;
    docker
        .run_container(
            "store",
            &["-p", &format!("{STORE_HOST}:{STORE_CONTAINER}")],
            &[
                "/bin/httpd",
                "-f",
                "-p",
                &STORE_CONTAINER.to_string(),
                "-h",
                "/www",
            ],
        )
        .expect("the store's stand-in, publishing its port");
    let addr = docker
        .docker(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", "store"])
        .expect("docker inspect")
        .stdout;
    let container: IpAddr = addr.trim().parse().expect("the container's address");
    let direct = [container];
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    let private_v4: [IpAddr; 1] = [NODE_PRIVATE_V4.into()];
    // Outside routes Docker's default network through the node's public address, and the peer
    // through its private one.
    net.outside
        .add_route("172.17.0.0".parse().unwrap(), 16, NODE_PUBLIC_V4.into())
        .unwrap();
    net.peer
        .add_route("172.17.0.0".parse().unwrap(), 16, NODE_PRIVATE_V4.into())
        .unwrap();

    // No guard: Docker 20.10 forwards a packet sent straight to the container's own port.
    expect(
        &net.outside,
        &direct,
        STORE_CONTAINER,
        Probe::Reached,
        &format!("Docker {} routes to the container directly", version.trim()),
    );
    expect(
        &net.outside,
        &v4,
        STORE_HOST,
        Probe::Reached,
        "published, no guard",
    );

    // Another program's DNAT from three ports straight to the container's own port: with no
    // guard it reaches the store.
    let nat = format!(
        "table ip foreign_nat {{\n\tchain pre {{\n\t\ttype nat hook prerouting priority dstnat; \
         policy accept;\n\t\ttcp dport {{ 8081, 8082, 8083 }} dnat to {container}:{STORE_CONTAINER}\n\
         \t}}\n}}\n"
    );
    load_nft(node, lab.dir(), "foreign-nat.nft", &nat);
    for port in [8081, 8082, 8083] {
        expect(
            &net.outside,
            &v4,
            port,
            Probe::Reached,
            "a foreign dnat to the container's port, no guard",
        );
    }

    // The guard with no container declared for the store: it takes the store for one on the host
    // and refuses only its host port; the container's own port is still reached from outside.
    let host = Host::new(node);
    let report = host.apply_with_docker(docker.docker_host(), &store_declaration(false));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.starts_with(&format!("refusing store {STORE_HOST} and")),
        "{report:#}"
    );
    expect(
        &net.outside,
        &node_public(),
        STORE_HOST,
        Probe::TimedOut,
        "published port",
    );
    expect(
        &net.outside,
        &direct,
        STORE_CONTAINER,
        Probe::Reached,
        "a guard that does not know the container port",
    );

    // The store's container declared: its container port is refused from outside too.
    let report = host.apply_with_docker(docker.docker_host(), &store_declaration(true));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.starts_with(&format!(
            "refusing store {STORE_HOST} (container port {STORE_CONTAINER}) and"
        )) && line.contains("written"),
        "{report:#}"
    );
    expect(
        &net.outside,
        &direct,
        STORE_CONTAINER,
        Probe::TimedOut,
        "the container's port routed to from outside",
    );
    expect(
        &net.outside,
        &node_public(),
        STORE_HOST,
        Probe::TimedOut,
        "the published port from outside",
    );
    expect(
        &net.peer,
        &private_v4,
        STORE_HOST,
        Probe::Reached,
        "the store's host port over the private network",
    );
    expect(
        &net.peer,
        &direct,
        STORE_CONTAINER,
        Probe::Reached,
        "the container routed to over the private network",
    );
    expect(
        &net.peer,
        &v4,
        STORE_HOST,
        Probe::TimedOut,
        "the peer over the public network",
    );

    // The foreign DNAT loaded before any guard: the table alone (no bpffs here) refuses it at
    // forward, where the translated port is seen.
    for port in [8081, 8082, 8083] {
        expect(
            &net.outside,
            &v4,
            port,
            Probe::TimedOut,
            "a foreign dnat to the container's port from outside",
        );
        expect(
            &net.peer,
            &private_v4,
            port,
            Probe::Reached,
            "a foreign dnat to the container's port over the private network",
        );
    }
    run_ok(node, &["nft", "delete", "table", "ip", "foreign_nat"]);

    // The rules as nft prints them.
    let listing = run_ok(
        node,
        &["nft", "list", "chain", "inet", "mesh_host", "guard"],
    );
    // The one bridge Docker reports (its default network), and no name pattern.
    let want = format!(
        "iifname != \"lo\" iifname != \"docker0\" iifname != \"{PRIVATE_IF}\" fib daddr oifname \
         \"docker0\" tcp dport {STORE_CONTAINER} drop comment \
         \"mesh-host:guard/store/container/tcp/{STORE_CONTAINER}/docker0\""
    );
    assert!(listing.contains(&want), "{want}\n{listing}");
    // From the private interface only its ranges pass, at the container port too.
    let want = format!(
        "iifname \"{PRIVATE_IF}\" ip saddr != {PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX} fib daddr \
         oifname \"docker0\" tcp dport {STORE_CONTAINER} drop"
    );
    assert!(listing.contains(&want), "{want}\n{listing}");
    assert!(!listing.contains('*'), "{listing}");
    assert!(
        listing.contains(&format!(
            "iifname != \"docker0\" iifname != \"{PRIVATE_IF}\" fib daddr type local tcp dport \
             {STORE_HOST} drop comment \"mesh-host:guard/store/tcp/{STORE_HOST}\""
        )),
        "{listing}"
    );

    // The next apply finds it in force.
    let report = host.apply_with_docker(docker.docker_host(), &store_declaration(true));
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("unchanged"),
        "{report:#}"
    );
}
