//! The guard layer's unit tests: where its pins live and what its maps hold for a spec.

use super::*;
use std::path::Path;

#[test]
fn pins_live_under_the_root_and_a_bpffs_is_mounted_only_on_the_machines_own() {
    let node = Pins::under(Path::new("/"));
    assert_eq!(node.dir, Path::new("/sys/fs/bpf/mesh-host"));
    assert_eq!(node.fs, Path::new("/sys/fs/bpf"));
    assert!(node.may_mount);
    let lab = Pins::under(Path::new("/tmp/x/root"));
    assert_eq!(lab.dir, Path::new("/tmp/x/root/sys/fs/bpf/mesh-host"));
    assert!(!lab.may_mount);
    assert!(Pins::mounting(Path::new("/tmp/x/root")).may_mount);
}

#[test]
fn the_maps_say_what_the_spec_says_and_no_pattern_is_trusted() {
    let mut spec = GuardSpec::for_node(15432, 15672, Some("wg0")).container_ports(5432, 15672);
    spec.add_runtime_bridge("docker0");
    let ports: Vec<[u8; 4]> = want_ports(&spec);
    assert_eq!(
        ports,
        [
            port_key(5432, 6, KIND_CONTAINER),
            port_key(15432, 6, KIND_HOST),
            port_key(15672, 6, KIND_HOST),
            port_key(15672, 6, KIND_CONTAINER),
        ]
    );
    let ifaces = want_ifaces(&spec).unwrap();
    assert_eq!(
        ifaces,
        [
            (iface_key("lo"), IFACE_EXEMPT),
            (iface_key("docker0"), IFACE_EXEMPT | IFACE_RUNTIME),
            (iface_key("wg0"), IFACE_PRIVATE),
        ]
    );
    // The private network's ranges, each family tagged, the prefix counted past the tag.
    assert!(want_nets(&spec).is_empty());
    let v4 = crate::Network {
        addr: "10.0.0.0".parse().unwrap(),
        len: 24,
    };
    let v6 = crate::Network {
        addr: "fd00::".parse().unwrap(),
        len: 64,
    };
    let spec = spec.private_ranges(&[v6, v4]);
    let nets = want_nets(&spec);
    assert_eq!(nets.len(), 2);
    let mut k4 = [0u8; NET_KEY_SIZE];
    k4[..4].copy_from_slice(&56u32.to_ne_bytes());
    k4[4] = NET_V4;
    k4[8..11].copy_from_slice(&[10, 0, 0]);
    assert!(nets.contains(&k4), "{nets:?}");
    let k6 = net_key(v6.addr, 64);
    assert_eq!(u32::from_ne_bytes([k6[0], k6[1], k6[2], k6[3]]), 96);
    assert_eq!((k6[4], &k6[8..10]), (prog::NET_V6, &[0xfd, 0][..]));
    let mut spec = spec;
    spec.allowed.push("br-*".into());
    let e = want_ifaces(&spec).unwrap_err().to_string();
    assert!(e.contains("\"br-*\" is a pattern"), "{e}");
}
