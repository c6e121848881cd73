//! `mesh-host inventory` on a lab machine with a real Docker engine: a listener the test started
//! is listed with its pid and process name, and a container with its published port.

use lab::{Lab, BUSYBOX_IMAGE};
use serde_json::Value;

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");

#[test]
fn inventory_lists_a_listener_with_its_process_and_a_container_with_its_published_port() {
    let lab = Lab::new().expect("a lab needs root, ip and nsenter");
    let node = lab.machine("inv").unwrap();
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node");
    docker
        .run_container(
            "inv-web",
            &["-p", "8082:80"],
            &["/bin/httpd", "-f", "-p", "80"],
        )
        .expect("a container with a published port");
    let listener = node.listen_tcp(7311).expect("a listener");
    let root = lab.dir().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let mut cmd = node.command(&[
        MESH,
        "--root",
        root.to_str().unwrap(),
        "inventory",
        "--json",
    ]);
    cmd.env("DOCKER_HOST", docker.docker_host());
    let out = lab::run(&mut cmd).expect("mesh-host inventory runs");
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let v: Value = crate::util::contract(&out.stdout);

    let ours: Vec<&Value> = v["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["port"] == 7311)
        .collect();
    assert!(!ours.is_empty(), "the listener on 7311 is missing: {v:#}");
    assert!(
        ours.iter().any(|l| l["pid"] == listener.pid()
            && l["process"] == "busybox"
            && l["proto"] == "tcp"),
        "the listener is not named by its pid {} and process: {ours:#?}",
        listener.pid()
    );

    assert_eq!(v["runtime"], "docker", "{v:#}");
    let web = v["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "inv-web")
        .unwrap_or_else(|| panic!("no container inv-web: {v:#}"));
    assert_eq!(web["image"], BUSYBOX_IMAGE);
    assert!(
        web["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["host_port"] == 8082 && p["container_port"] == 80 && p["proto"] == "tcp"),
        "{web:#}"
    );
    // Docker's proxy for the published port is a listener too, named as such.
    assert!(
        v["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["port"] == 8082),
        "{v:#}"
    );
    assert!(
        v["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "docker0" && i["kind"] == "bridge"),
        "{v:#}"
    );
}
