//! Tests of declaration validation: round trips, refusal of the unknown anywhere, and every
//! problem named at once.

use super::*;
use crate::declaration::*;
use proptest::prelude::*;
use serde_json::json;
use std::path::Path;

fn ok(v: Value) -> Declaration {
    validate_value(&v, Source::Local).unwrap_or_else(|p| panic!("refused:\n{p}"))
}

fn problems(v: Value, source: Source) -> Vec<String> {
    match validate_value(&v, source) {
        Ok(_) => panic!("accepted: {v}"),
        Err(p) => p.0.iter().map(|p| p.to_string()).collect(),
    }
}

fn base() -> Value {
    json!({
        "version": 1, "node": "workstation", "mode": "adopted", "taken": ["proxy"],
        "settings": {
            "ports": {"store": 5432, "bus": 5672, "broker_management": 15672, "registry": 5000, "hub": 51820},
            "private_network": {"interface": "mesh0", "range": "10.77.0.0/24"}
        },
        "resources": [
            {"id": "proxy/config", "module": "proxy", "type": "file", "path": "/etc/caddy/Caddyfile", "content": "x", "mode": "0644"},
            {"id": "proxy/data", "module": "proxy", "type": "directory", "path": "/srv/caddy"},
            {"id": "proxy/https", "module": "proxy", "type": "opening", "port": 443, "proto": "tcp", "from": "anywhere", "path": "forwarded"},
            {"id": "db/create", "type": "action", "run": ["createdb", "mesh"], "verify": ["psql", "-lqt"]}
        ]
    })
}

#[test]
fn the_issue_example_is_valid() {
    let d = ok(base());
    assert_eq!(d.mode, Mode::Adopted);
    assert_eq!(d.resources.len(), 4);
    assert!(d.is_taken(Some("proxy")));
    assert!(!d.is_taken(None));
}

#[test]
fn every_named_check_fires() {
    let v = json!({
        "version": 1, "node": "n", "mode": "converged",
        "resources": [
            {"id": "", "type": "file", "path": "/a", "content": ""},
            {"id": "b", "type": "file", "path": "/x/../etc/passwd", "content": ""},
            {"id": "c", "type": "file", "path": "/c", "content": "", "mode": "8644"},
            {"id": "d", "type": "opening", "port": 0, "proto": "tcp", "from": ["300.1.1.1/8"], "path": "incoming"},
            {"id": "e", "type": "service", "name": "mesh-host.service", "state": "running", "enabled": true},
            {"id": "f", "type": "file", "path": "/var/lib/mesh-host/state.json", "content": ""},
            {"id": "g", "type": "file", "path": "/usr/local/bin/mesh-host", "content": ""},
            {"id": "h", "type": "directory", "path": 7},
            {"id": "i", "type": "container", "name": "web", "image": "x", "ports": [{"host_port": 1, "container_port": 2, "proto": "sctp"}]},
            {"id": "j", "type": "opening", "port": 1, "proto": "tcp", "from": "private", "path": "incoming"}
        ]
    });
    let p = problems(v, Source::Local);
    let expect = [
        "resources[0].id: id must not be empty",
        "resources[1].path: must not contain '..'",
        "resources[2].mode: mode must be an octal string",
        "resources[3].port: port 0 is outside 1-65535",
        "resources[3].from[0]: \"300.1.1.1/8\" is not a CIDR",
        "resources[4].name: mesh-host.service is the host's own unit",
        "resources[5].path: /var/lib/mesh-host/state.json is the host's own",
        "resources[6].path: /usr/local/bin/mesh-host is the host's own",
        "resources[7].path: must be a string, found a number",
        "resources[8].ports[0].proto: must be one of tcp, udp",
        "resources[9].from: \"private\" needs settings.private_network",
    ];
    for e in expect {
        assert!(
            p.iter().any(|x| x.starts_with(e)),
            "missing {e:?} in {p:#?}"
        );
    }
    assert_eq!(p.len(), expect.len(), "{p:#?}");
}

#[test]
fn interface_names_and_ranges_are_checked() {
    let mut v = base();
    v["settings"]["private_network"] =
        json!({"interface": "a-very-long-interface-name", "range": "10.77.0.1/24"});
    let p = problems(v, Source::Local);
    assert!(
        p.iter().any(|x| x
            .starts_with("settings.private_network.interface: interface name is longer than 15")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|x| x
                .starts_with("settings.private_network.range: \"10.77.0.1/24\" is not a network")),
        "{p:?}"
    );
}

#[test]
fn an_ipv6_range_beside_an_ipv4_one_is_range_v6_and_checked() {
    let mut v = base();
    v["settings"]["private_network"]["range_v6"] = json!("fd77::/64");
    let d = ok(v.clone());
    let pn = d.settings.unwrap().private_network.unwrap();
    assert_eq!(pn.range_v6.as_deref(), Some("fd77::/64"));
    let shown: Vec<String> = pn.networks().iter().map(|n| n.to_string()).collect();
    assert_eq!(shown, ["10.77.0.0/24", "fd77::/64"]);
    // An opening on the store from inside the v6 range is inside the private network.
    v["resources"] = json!([{"id": "db/v6", "type": "opening", "port": 5432, "proto": "tcp",
                             "from": ["fd77::/64"], "path": "incoming"}]);
    ok(v);
    let cases = [
        (json!("fd77::1/64"), "has host bits set"),
        (json!("10.78.0.0/24"), "is not an IPv6 network"),
        (json!("fd77::"), "is not a CIDR"),
        (json!(7), "must be a string"),
    ];
    for (bad, why) in cases {
        let mut v = base();
        v["settings"]["private_network"]["range_v6"] = bad.clone();
        let p = problems(v, Source::Local);
        assert!(
            p.iter()
                .any(|x| x.starts_with("settings.private_network.range_v6:") && x.contains(why)),
            "{bad}: {p:?}"
        );
    }
    // Beside an IPv6 range there is no second one.
    let mut v = base();
    v["settings"]["private_network"] =
        json!({"interface": "mesh0", "range": "fd77::/64", "range_v6": "fd78::/64"});
    let p = problems(v, Source::Local);
    assert!(
        p.iter()
            .any(|x| x.starts_with("settings.private_network.range_v6:")
                && x.contains("beside an IPv6 range")),
        "{p:?}"
    );
}

#[test]
fn deadlines_are_whole_seconds_up_to_a_day_and_known_by_name() {
    let mut v = base();
    v["settings"]["deadlines"] = json!({"container_s": 1, "package_s": 86400, "firewall_s": 5});
    let d = ok(v.clone());
    let deadlines = d.settings.unwrap().deadlines.unwrap();
    assert_eq!(deadlines.container_s, Some(1));
    assert_eq!(deadlines.package_s, Some(86400));
    assert_eq!(deadlines.firewall_s, Some(5));
    assert_eq!(deadlines.service_s, None);

    v["settings"]["deadlines"] = json!({
        "container_s": 0, "package_s": 86401, "service_s": 1.5, "query_s": "60", "forever_s": 9
    });
    let mut got = problems(v.clone(), Source::Local);
    got.sort();
    let from = "must be a whole number of seconds from 1 to 86400, found";
    assert_eq!(
        got,
        [
            format!("settings.deadlines.container_s: {from} 0"),
            "settings.deadlines.forever_s: unknown field".to_string(),
            format!("settings.deadlines.package_s: {from} 86401"),
            format!("settings.deadlines.query_s: {from} a string"),
            format!("settings.deadlines.service_s: {from} 1.5"),
        ]
    );
    v["settings"]["deadlines"] = json!([]);
    assert_eq!(
        problems(v, Source::Local),
        ["settings.deadlines: must be an object, found an array"]
    );
}

#[test]
fn actions_are_refused_from_the_link_only() {
    assert!(validate_value(&base(), Source::Bundle).is_ok());
    assert!(validate_value(&base(), Source::Local).is_ok());
    let p = problems(base(), Source::Link);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("resources[3].type: an action is refused from the link"));
}

fn release() -> Value {
    json!({"version": 1, "node": "workstation", "mode": "adopted", "taken": [], "resources": [],
           "release": true})
}

#[test]
fn a_release_names_nothing_and_comes_from_the_link_only() {
    let d = validate_value(&release(), Source::Link).unwrap();
    assert!(d.release && d.resources.is_empty());
    for source in [Source::Local, Source::Bundle] {
        let p = problems(release(), source);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("release: a release is accepted from the link only"));
    }
    let mut named = release();
    named["resources"] = json!([base()["resources"][0].clone()]);
    named["taken"] = json!(["proxy"]);
    let p = problems(named, Source::Link);
    assert!(p
        .iter()
        .any(|p| p.starts_with("resources: a release names nothing")));
    assert!(p
        .iter()
        .any(|p| p.starts_with("taken: a release names nothing")));
    let mut word = release();
    word["release"] = json!("yes");
    let p = problems(word, Source::Link);
    assert!(
        p.iter()
            .any(|p| p == "release: must be a boolean, found a string"),
        "{p:?}"
    );
}

#[test]
fn a_declaration_listing_no_resources_is_not_a_release() {
    let mut empty = release();
    empty.as_object_mut().unwrap().remove("release");
    let d = validate_value(&empty, Source::Link).unwrap();
    assert!(!d.release, "nothing assigned is not a release");
    empty["release"] = json!(false);
    assert!(!validate_value(&empty, Source::Link).unwrap().release);
    // And it is written back without the field.
    assert!(serde_json::to_value(&d).unwrap().get("release").is_none());
}

#[test]
fn unknown_type_and_wrong_types_are_named() {
    let mut v = base();
    v["resources"][0]["type"] = json!("symlink");
    v["taken"] = json!("proxy");
    v["version"] = json!("1");
    let p = problems(v, Source::Local);
    assert!(
        p.iter()
            .any(|x| x.starts_with("resources[0].type: unknown type \"symlink\"")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|x| x.starts_with("taken: must be an array of strings")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|x| x.starts_with("version: must be 1")),
        "{p:?}"
    );
}

#[test]
fn two_resources_on_one_path_are_refused() {
    let mut v = base();
    v["resources"][1]["path"] = json!("/etc/caddy/Caddyfile");
    let p = problems(v, Source::Local);
    assert_eq!(
        p,
        vec![
            "resources[1]: \"/etc/caddy/Caddyfile\" is already declared by resources[0]"
                .to_string()
        ]
    );
}

#[test]
fn cidrs() {
    assert_eq!(parse_cidr("10.0.0.0/8", false).unwrap().1, 8);
    assert_eq!(parse_cidr("fd77::/64", false).unwrap().1, 64);
    assert_eq!(parse_cidr("10.0.0.1", true).unwrap().1, 32);
    assert!(parse_cidr("10.0.0.1", false).is_err());
    assert!(parse_cidr("10.0.0.0/33", false).is_err());
    assert!(parse_cidr("10.0.0.0/+8", false).is_err());
    assert!(parse_cidr("fd77::1/64", false).is_err());
}

mod properties;

#[test]
fn everything_named_after_the_host_in_its_folders_is_refused() {
    for p in [
        "/bin/mesh-host",
        "/usr/local/bin/mesh-host",
        "/etc/systemd/system/mesh-host.service.d/override.conf",
        "/etc/systemd/system/mesh-host-launcher.service",
        "/etc/conf.d/mesh-host",
        "/etc/init.d/mesh-host-launcher",
        "/var/lib/mesh-host/state.json",
        "/etc/mesh-host",
    ] {
        assert!(
            check_path(p).unwrap_err().0.contains("is the host's own"),
            "{p}"
        );
    }
    for p in [
        "/etc/caddy/Caddyfile",
        "/var/lib/mesh/store",
        "/srv/mesh-host/data",
    ] {
        assert!(check_path(p).is_ok(), "{p}");
    }
    for unit in [
        "mesh-host",
        "mesh-host.service",
        "mesh-host-launcher.service",
        "mesh-host@1.service",
    ] {
        assert!(check_unit_name(unit).is_err(), "{unit}");
    }
    assert!(check_unit_name("nginx.service").is_ok());
}

#[test]
fn a_key_given_twice_is_refused_with_its_path() {
    let text = r#"{"version": 1, "node": "n", "mode": "converged", "resources": [
        {"id": "a", "type": "file", "path": "/etc/safe.conf", "path": "/etc/other.conf", "content": ""}]}"#;
    let p = parse(text, Source::Local).unwrap_err();
    assert_eq!(
        p.0,
        vec![Problem {
            path: "resources[0].path".into(),
            message: "is given twice".into()
        }]
    );
}

#[test]
fn a_service_named_with_and_without_its_suffix_is_one_service() {
    let mut v = base();
    v["resources"] = json!([
        {"id": "a", "type": "service", "name": "nginx", "state": "running", "enabled": true},
        {"id": "b", "type": "service", "name": "nginx.service", "state": "stopped", "enabled": false}
    ]);
    let p = problems(v, Source::Local);
    assert_eq!(
        p,
        vec!["resources[1]: \"nginx\" is already declared by resources[0]".to_string()]
    );
}

#[test]
fn the_hosts_own_package_may_be_named_at_a_version_to_upgrade_and_nothing_else_of_it() {
    let mut v = base();
    v["resources"] = json!([
        {"id": "host", "type": "package", "name": "mesh-host", "version": "0.2.0"}
    ]);
    ok(v.clone());
    v["resources"] = json!([
        {"id": "host", "type": "package", "name": "mesh-host"},
        {"id": "launcher", "type": "package", "name": "mesh-host-launcher", "version": "1"}
    ]);
    let p = problems(v, Source::Local);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p[0].starts_with(
            "resources[0].version: the host's own package mesh-host must name the version"
        ),
        "{p:#?}"
    );
    assert!(
        p[1].starts_with("resources[1].name: mesh-host-launcher is named after the host"),
        "{p:#?}"
    );
}

/// An opening on the store's or broker-management's port (tcp) wider than the private network
/// contradicts the guard: refused, naming the setting; from the private network, its CIDRs or
/// loopback, or over udp (which the guard does not refuse), it stands.
#[test]
fn an_opening_on_a_guarded_port_wider_than_the_private_network_is_refused() {
    let mut v = base();
    let resources = v["resources"].as_array_mut().unwrap();
    let opening = |id: &str, port: u16, proto: &str, from: Value| json!({"id": id, "type": "opening", "port": port, "proto": proto, "from": from, "path": "incoming"});
    resources.extend([
        opening("a", 5432, "tcp", json!("anywhere")),
        opening(
            "b",
            15672,
            "tcp",
            json!(["10.77.0.0/25", "10.76.0.0/16", "::/0"]),
        ),
        opening("c", 5432, "tcp", json!("private")),
        opening("d", 5432, "tcp", json!(["10.77.0.5", "127.0.0.1", "::1"])),
        opening("e", 5432, "udp", json!("anywhere")),
        opening("f", 5672, "tcp", json!("anywhere")),
        opening("g", 5432, "tcp", json!(["10.77.0.0/16"])),
    ]);
    let got = problems(v, Source::Local);
    let at: Vec<&str> = got.iter().map(|p| p.split(':').next().unwrap()).collect();
    assert_eq!(
        at,
        [
            "resources[4].from",
            "resources[5].from[1]",
            "resources[5].from[2]",
            "resources[10].from[0]"
        ],
        "{got:#?}"
    );
    assert!(got[0].contains("settings.ports.store"), "{}", got[0]);
    assert!(
        got[1].contains("settings.ports.broker_management"),
        "{}",
        got[1]
    );
    assert!(got[0].contains("10.77.0.0/24"), "{}", got[0]);

    // With no private network declared, any source but loopback is refused.
    let mut v = base();
    v["settings"]
        .as_object_mut()
        .unwrap()
        .remove("private_network");
    v["resources"] = json!([opening(
        "a",
        5432,
        "tcp",
        json!(["10.77.0.0/24", "127.0.0.0/8"])
    )]);
    let got = problems(v, Source::Local);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].starts_with("resources[0].from[0]") && got[0].contains("declare none"));
}

/// Proves that the kernel's limits are validation's: a component over NAME_MAX, a path over
/// PATH_MAX and a file name with no room for its temporary name are each named, all at once,
/// with their JSON paths, while the longest accepted ones pass.
#[test]
fn paths_past_the_kernels_limits_are_named_at_once() {
    let long = "a".repeat(NAME_MAX + 1);
    let deep = format!("/srv{}", "/d".repeat((PATH_MAX - 4) / 2));
    let name = "n".repeat(FILE_NAME_MAX + 1);
    let mut v = base();
    v["resources"] = json!([
        {"id": "a", "type": "file", "path": format!("/srv/{long}/f"), "content": "x"},
        {"id": "b", "type": "directory", "path": deep},
        {"id": "c", "type": "file", "path": format!("/srv/{name}"), "content": "x"},
        {"id": "d", "type": "directory", "path": format!("/srv/{}", "a".repeat(NAME_MAX))},
        {"id": "e", "type": "file", "path": format!("/srv/{}", "n".repeat(FILE_NAME_MAX)), "content": "x"},
        {"id": "f", "type": "directory", "path": format!("/srv{}", "/d".repeat((PATH_MAX - 5) / 2))}
    ]);
    let p = problems(v, Source::Local);
    assert_eq!(p.len(), 3, "{p:#?}");
    assert!(
        p[0].starts_with("resources[0].path: component \"aaaaaaaaaaaaaaaaaaaaaaaa\"… is 256 bytes long; a path component is at most 255 bytes"),
        "{p:#?}"
    );
    assert!(
        p[1].starts_with(
            "resources[1].path: is 4096 bytes long; a machine path is at most 4095 bytes"
        ),
        "{p:#?}"
    );
    assert!(
        p[2].starts_with("resources[2].path: file name is 239 bytes long; a declared file's name is at most 238 bytes"),
        "{p:#?}"
    );
}

/// Proves that the root counts: a path within PATH_MAX alone is refused once the root is put
/// before it, and the running test binary, declared by its path under a root that holds it, is
/// refused as the host's own, while `/` and another root accept both.
#[test]
fn under_the_root_the_whole_path_and_the_running_binary_are_judged() {
    let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
    let exe_dir = exe.parent().unwrap();
    let parent = exe_dir.parent().unwrap();
    let within = format!("/{}", exe.strip_prefix(parent).unwrap().display());
    let deep = format!("/srv{}", "/d".repeat((PATH_MAX - 5) / 2));
    let d = crate::system::fake::declaration(
        "converged",
        &[],
        json!([
            {"id": "a", "type": "file", "path": within, "content": "x"},
            {"id": "b", "type": "directory", "path": deep}
        ]),
    );
    let p: Vec<String> = under_root(&d, parent)
        .unwrap_err()
        .0
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p[0].starts_with(&format!(
            "resources[0].path: {within} is this host's own running binary ({} under the root",
            exe.display()
        )),
        "{p:#?}"
    );
    assert!(
        p[1].starts_with(&format!(
            "resources[1].path: is {} bytes long under the root {}",
            parent.as_os_str().len() + deep.len(),
            parent.display()
        )),
        "{p:#?}"
    );
    under_root(&d, Path::new("/")).expect("under / neither is refused");
}

#[test]
fn the_found_files_read_bounds_are_whole_bytes_and_seconds() {
    let mut v = base();
    v["settings"]["found_read_limit_bytes"] = json!(8_589_934_592u64);
    v["settings"]["found_read_s"] = json!(5);
    let s = ok(v.clone()).settings.unwrap();
    assert_eq!(
        (s.found_read_limit_bytes, s.found_read_s),
        (Some(8_589_934_592), Some(5))
    );
    v["settings"]["found_read_limit_bytes"] = json!(-1);
    v["settings"]["found_read_s"] = json!(0);
    let mut got = problems(v, Source::Local);
    got.sort();
    assert_eq!(
        got,
        [
            "settings.found_read_limit_bytes: must be a whole number of bytes, found a number",
            "settings.found_read_s: must be a whole number of seconds from 1 to 86400, found 0",
        ]
    );
}

/// A recovered record may carry the stamp the store kept (a record of a file larger than one
/// read, as `owned --json` and the link's reports give it); anything else in its place is refused.
#[test]
fn a_recovered_record_may_carry_its_stamp() {
    let mut v = base();
    v["recovered"] = json!([{"id": "f", "shape": "file", "key": "/etc/f", "digest": "sha256:00",
                             "stamp": "2049:12:70000:1764871200.000000001:1764871200.000000005"}]);
    let d = ok(v.clone());
    assert_eq!(d.recovered[0].stamp.map(|s| s.size), Some(70_000));
    v["recovered"][0]["stamp"] = json!("yesterday");
    let got = problems(v, Source::Local);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("recovered[0].stamp: not a file's stamp"),
        "{got:?}"
    );
}

#[test]
fn an_owner_or_group_past_the_largest_id_is_refused_naming_it() {
    let v = json!({
        "version": 1, "node": "n", "mode": "converged",
        "resources": [
            {"id": "a", "type": "file", "path": "/a", "content": "", "owner": "4294967295"},
            {"id": "b", "type": "directory", "path": "/b", "group": "99999999999"},
            {"id": "c", "type": "file", "path": "/c", "content": "", "owner": "4294967294", "group": "0"}
        ]
    });
    let p = problems(v, Source::Local);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].contains("resources[0].owner") && p[0].contains("4294967295 is out of range"),
        "{p:?}"
    );
    assert!(
        p[1].contains("resources[1].group") && p[1].contains("99999999999 is out of range"),
        "{p:?}"
    );
}
