//! The checks of each resource shape (file, directory, service, package, container, action,
//! opening) and of the machine paths and ownership they name, as `Walker` methods.

use super::*;

impl Walker {
    pub(super) fn machine_path(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        check: fn(&str) -> Result<(), Invalid>,
    ) -> Option<String> {
        let p = self.string(map, "path", path)?;
        match check(p) {
            Ok(()) => Some(p.to_string()),
            Err(m) => {
                self.err(join(path, "path"), m.0);
                None
            }
        }
    }

    pub(super) fn ownership(&mut self, map: &Map<String, Value>, path: &str) {
        if let Some(m) = self.string(map, "mode", path) {
            self.checked(join(path, "mode"), parse_mode(m).map(|_| ()));
        }
        for key in ["owner", "group"] {
            if let Some(o) = self.string(map, key, path) {
                self.checked(join(path, key), check_account(o));
            }
        }
    }

    pub(super) fn file(&mut self, map: &Map<String, Value>, path: &str) -> Option<String> {
        let key = self.machine_path(map, path, check_file_path);
        self.ownership(map, path);
        let text = self.string(map, "content", path);
        let b64 = self.string(map, "content_base64", path);
        match (text, b64) {
            (Some(_), Some(_)) => self.err(
                path,
                "content and content_base64 are both given; give exactly one",
            ),
            (None, None) if !map.contains_key("content") && !map.contains_key("content_base64") => {
                self.err(join(path, "content"), "is required (or content_base64)")
            }
            (None, Some(b)) if base64::engine::general_purpose::STANDARD.decode(b).is_err() => {
                self.err(join(path, "content_base64"), "is not valid base64")
            }
            _ => {}
        }
        self.boolean(map, "create_once", path);
        key
    }

    pub(super) fn directory(&mut self, map: &Map<String, Value>, path: &str) -> Option<String> {
        let key = self.machine_path(map, path, check_path);
        self.ownership(map, path);
        key
    }

    pub(super) fn service(&mut self, map: &Map<String, Value>, path: &str) -> Option<String> {
        self.one_of(map, "state", path, &["running", "stopped"]);
        self.boolean(map, "enabled", path);
        let name = self.string(map, "name", path)?;
        match check_unit_name(name) {
            // `nginx` and `nginx.service` are one service: compared without the suffix.
            Ok(()) => Some(name.strip_suffix(".service").unwrap_or(name).to_string()),
            Err(m) => {
                self.err(join(path, "name"), m.0);
                None
            }
        }
    }

    pub(super) fn package(&mut self, map: &Map<String, Value>, path: &str) -> Option<String> {
        if let Some(v) = self.string(map, "version", path) {
            self.checked(join(path, "version"), check_package_version(v));
        }
        let name = self.string(map, "name", path)?;
        if name == OWN_PACKAGE && !map.contains_key("version") {
            // Upgrading the host names the version it upgrades to; "any version" of the host
            // would make every release a restart nobody declared.
            self.err(
                join(path, "version"),
                format!("the host's own package {OWN_PACKAGE} must name the version to run"),
            );
        }
        match check_package_name(name) {
            Ok(()) => Some(name.to_string()),
            Err(m) => {
                self.err(join(path, "name"), m.0);
                None
            }
        }
    }

    pub(super) fn container(&mut self, map: &Map<String, Value>, path: &str) -> Option<String> {
        if let Some(image) = self.string(map, "image", path) {
            self.checked(join(path, "image"), check_image(image));
        }
        self.strings(map, "command", path, check_arg);
        self.strings(map, "networks", path, check_container_name);
        self.one_of(
            map,
            "restart",
            path,
            &["no", "always", "unless-stopped", "on-failure"],
        );
        if let Some(env) = map.get("env") {
            let ep = join(path, "env");
            match env.as_object() {
                Some(vars) => {
                    for (k, v) in vars {
                        self.checked(format!("{ep}.{k}"), check_env_name(k));
                        match v.as_str() {
                            Some(s) => self.checked(format!("{ep}.{k}"), check_arg(s)),
                            None => self.err(
                                format!("{ep}.{k}"),
                                format!("must be a string, found {}", type_name(v)),
                            ),
                        }
                    }
                }
                None => self.err(ep, format!("must be an object, found {}", type_name(env))),
            }
        }
        if let Some(ports) = map.get("ports") {
            let pp = join(path, "ports");
            match ports.as_array() {
                Some(items) => {
                    let mut seen = BTreeMap::new();
                    for (i, item) in items.iter().enumerate() {
                        let ip = format!("{pp}[{i}]");
                        let fields = ["host_address", "host_port", "container_port", "proto"];
                        let Some(pm) = self.object(item, &ip, &fields, &fields[1..]) else {
                            continue;
                        };
                        let addr = self.string(pm, "host_address", &ip).map(str::to_string);
                        if let Some(a) = &addr {
                            if a.parse::<IpAddr>().is_err() {
                                self.err(
                                    join(&ip, "host_address"),
                                    format!("{a:?} is not an IP address"),
                                );
                            }
                        }
                        let host = self.port(pm, "host_port", &ip);
                        self.port(pm, "container_port", &ip);
                        self.one_of(pm, "proto", &ip, &["tcp", "udp"]);
                        let proto = pm.get("proto").and_then(Value::as_str).unwrap_or("");
                        if let Some(h) = host {
                            if let Some(first) = seen.insert((addr, h, proto.to_string()), i) {
                                self.err(
                                    join(&ip, "host_port"),
                                    format!(
                                        "{proto} port {h} is already published by {pp}[{first}]"
                                    ),
                                );
                            }
                        }
                    }
                }
                None => self.err(pp, format!("must be an array, found {}", type_name(ports))),
            }
        }
        let name = self.string(map, "name", path)?;
        match check_container_name(name) {
            Ok(()) => Some(name.to_string()),
            Err(m) => {
                self.err(join(path, "name"), m.0);
                None
            }
        }
    }

    pub(super) fn action(&mut self, map: &Map<String, Value>, path: &str, source: Source) {
        if source == Source::Link {
            self.err(
                join(path, "type"),
                "an action is refused from the link: actions are accepted only from the bundle \
                 and from a person at the machine",
            );
        }
        for key in ["run", "verify"] {
            if let Some(argv) = self.strings(map, key, path, check_arg) {
                if argv.is_empty() || argv[0].is_empty() {
                    self.err(
                        join(path, key),
                        "must name a program (a non-empty argv array)",
                    );
                }
            }
        }
    }

    pub(super) fn opening(&mut self, map: &Map<String, Value>, path: &str, has_private: bool) {
        self.guarded_opening(map, path);
        self.port(map, "port", path);
        self.one_of(map, "proto", path, &["tcp", "udp"]);
        self.one_of(map, "path", path, &["incoming", "forwarded"]);
        let Some(from) = map.get("from") else { return };
        let fp = join(path, "from");
        match from {
            Value::String(s) if s == "anywhere" => {}
            Value::String(s) if s == "private" => {
                if !has_private {
                    self.err(
                        fp,
                        "\"private\" needs settings.private_network, which this declaration lacks",
                    );
                }
            }
            Value::String(s) => self.err(
                fp,
                format!("must be \"anywhere\", \"private\" or a list of CIDRs, found {s:?}"),
            ),
            Value::Array(items) => {
                if items.is_empty() {
                    self.err(
                        fp.clone(),
                        "an empty list of CIDRs admits nothing; say which sources",
                    );
                }
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(c) => {
                            self.checked(format!("{fp}[{i}]"), parse_cidr(c, true).map(|_| ()))
                        }
                        None => self.err(
                            format!("{fp}[{i}]"),
                            format!("must be a CIDR string, found {}", type_name(item)),
                        ),
                    }
                }
            }
            other => self.err(
                fp,
                format!(
                    "must be \"anywhere\", \"private\" or a list of CIDRs, found {}",
                    type_name(other)
                ),
            ),
        }
    }
}
