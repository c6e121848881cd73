//! Property tests of validation: any declaration it accepts round-trips, and any field broken
//! anywhere in one is named at its JSON path.

use super::*;

fn ident() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,8}"
}

fn machine_path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z][a-z0-9._-]{0,6}", 1..4)
        .prop_map(|parts| format!("/srv/{}", parts.join("/")))
}

fn from() -> impl Strategy<Value = From> {
    prop_oneof![
        Just(From::Named(FromName::Anywhere)),
        Just(From::Named(FromName::Private)),
        prop::collection::vec(
            prop_oneof![
                (0u8..=255, 0u8..=32).prop_map(|(a, l)| {
                    let addr = u32::from_be_bytes([10, a, 0, 0])
                        & u32::MAX.checked_shl(32 - l as u32).unwrap_or(0);
                    format!("{}/{l}", std::net::Ipv4Addr::from(addr))
                }),
                Just("fd77::/64".to_string()),
                Just("192.0.2.7".to_string()),
            ],
            1..3
        )
        .prop_map(From::Cidrs),
    ]
}

fn shape_of(i: usize) -> impl Strategy<Value = Resource> {
    let id = format!("r{i}");
    let module = prop::option::of(ident());
    (
        module,
        0u8..7,
        machine_path(),
        ident(),
        1u16..=65535,
        from(),
        any::<bool>(),
        "[ -~]{0,20}",
    )
        .prop_map(move |(module, kind, path, name, port, from, flag, text)| {
            let id = id.clone();
            // Keys are unique per resource so no two resources collide on a path or a name.
            let path = format!("{path}/{id}");
            let name = format!("{name}{i}");
            match kind {
                0 => Resource::File(FileSpec {
                    id,
                    module,
                    path,
                    content: if flag { Some(text) } else { None },
                    content_base64: if flag { None } else { Some("aGVsbG8=".into()) },
                    mode: Some("0640".into()),
                    owner: if flag { Some("root".into()) } else { None },
                    group: None,
                    create_once: flag,
                }),
                1 => Resource::Directory(DirectorySpec {
                    id,
                    module,
                    path,
                    mode: None,
                    owner: None,
                    group: Some("0".into()),
                }),
                2 => Resource::Service(ServiceSpec {
                    id,
                    module,
                    name,
                    state: if flag {
                        ServiceState::Running
                    } else {
                        ServiceState::Stopped
                    },
                    enabled: flag,
                }),
                3 => Resource::Package(PackageSpec {
                    id,
                    module,
                    name,
                    version: flag.then(|| "1.2-3".into()),
                }),
                4 => Resource::Container(ContainerSpec {
                    id,
                    module,
                    name,
                    image: "lab/busybox:1".into(),
                    command: vec!["/bin/httpd".into(), text],
                    env: [("A_B".to_string(), "c d".to_string())]
                        .into_iter()
                        .collect(),
                    ports: vec![PublishedPort {
                        host_address: flag.then(|| "127.0.0.1".into()),
                        host_port: port,
                        container_port: 80,
                        proto: Proto::Tcp,
                    }],
                    restart: Some("unless-stopped".into()),
                    networks: vec![],
                }),
                5 => Resource::Action(ActionSpec {
                    id,
                    module,
                    run: vec!["true".into(), text],
                    verify: vec!["false".into()],
                }),
                _ => Resource::Opening(OpeningSpec {
                    id,
                    module,
                    port,
                    proto: if flag { Proto::Tcp } else { Proto::Udp },
                    from,
                    path: if flag {
                        PathKind::Incoming
                    } else {
                        PathKind::Forwarded
                    },
                }),
            }
        })
}

fn declaration() -> impl Strategy<Value = Declaration> {
    (
        0usize..6,
        prop::collection::vec(ident(), 0..3),
        any::<bool>(),
    )
        .prop_flat_map(|(n, taken, adopted)| {
            let resources: Vec<_> = (0..n).map(shape_of).collect();
            (resources, Just(taken), Just(adopted))
        })
        .prop_map(|(resources, mut taken, adopted)| {
            taken.sort();
            taken.dedup();
            Declaration {
                version: 1,
                node: "node-1".into(),
                mode: if adopted {
                    Mode::Adopted
                } else {
                    Mode::Converged
                },
                taken,
                settings: Some(Settings {
                    ports: Ports::default(),
                    private_network: Some(PrivateNetwork {
                        interface: "mesh0".into(),
                        range: "10.77.0.0/24".into(),
                        range_v6: None,
                    }),
                    deadlines: Some(run::Deadlines {
                        package_s: Some(1200),
                        ..Default::default()
                    }),
                    originals_limit_bytes: None,
                    found_read_limit_bytes: None,
                    found_read_s: None,
                }),
                resources,
                release: false,
                recovered: Vec::new(),
            }
        })
}

/// Every JSON path of an object in the document where a field name is fixed by the format
/// (so not inside `env`, whose keys are the declaration's own).
fn object_paths(v: &Value, here: Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    match v {
        Value::Object(m) => {
            out.push(here.clone());
            for (k, child) in m {
                if k == "env" {
                    continue;
                }
                let mut p = here.clone();
                p.push(PathStep::Key(k.clone()));
                object_paths(child, p, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let mut p = here.clone();
                p.push(PathStep::Index(i));
                object_paths(child, p, out);
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn render(path: &[PathStep]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            PathStep::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            PathStep::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn at<'a>(v: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(v, |v, step| match step {
        PathStep::Key(k) => &mut v[k.as_str()],
        PathStep::Index(i) => &mut v[*i],
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_valid_declaration_round_trips(d in declaration()) {
        let text = serde_json::to_string(&d).unwrap();
        let back = parse(&text, Source::Local).map_err(|p| TestCaseError::fail(format!("{p}\n{text}")))?;
        prop_assert_eq!(back, d);
    }

    #[test]
    fn an_unknown_key_anywhere_is_refused_with_its_path(d in declaration(), pick in any::<prop::sample::Index>()) {
        let mut v = serde_json::to_value(&d).unwrap();
        let mut paths = Vec::new();
        object_paths(&v, Vec::new(), &mut paths);
        let path = pick.get(&paths).clone();
        at(&mut v, &path).as_object_mut().unwrap().insert("surprise".into(), json!(true));
        let p = problems(v, Source::Local);
        let want = if path.is_empty() { "surprise".to_string() } else { format!("{}.surprise", render(&path)) };
        prop_assert_eq!(p, vec![format!("{want}: unknown field")]);
    }

    #[test]
    fn independent_problems_are_all_named(d in declaration(), ports in prop::collection::vec(65536u64..1_000_000, 1..4)) {
        let mut v = serde_json::to_value(&d).unwrap();
        let mut want = Vec::new();
        // One problem in the settings, one in the header, and one per extra opening.
        v["settings"]["ports"]["hub"] = json!(0);
        want.push("settings.ports.hub: port 0 is outside 1-65535".to_string());
        v["node"] = json!("");
        want.push("node: node name must not be empty".to_string());
        let n = d.resources.len();
        for (k, port) in ports.iter().enumerate() {
            v["resources"].as_array_mut().unwrap().push(json!({
                "id": format!("extra{k}"), "type": "opening", "port": port, "proto": "udp",
                "from": "anywhere", "path": "incoming"
            }));
            want.push(format!("resources[{}].port: port {port} is outside 1-65535", n + k));
        }
        let mut p = problems(v, Source::Local);
        p.sort();
        want.sort();
        prop_assert_eq!(p, want);
    }
}
