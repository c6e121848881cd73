//! Validation of a declaration: every problem in the document named at once, with its JSON path.
//!
//! The host refuses the unknown, whole: a field it does not know is something the control plane
//! believes it asked for. So validation walks the raw JSON (not a typed struct, which would stop
//! at the first error), collects every problem, and only a document with none is turned into a
//! [`Declaration`]. Values that will later reach a command line or a ruleset are checked here.

use super::{Declaration, Source, FORMAT_VERSION};
use base64::Engine;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

/// One problem in a declaration, at a JSON path such as `resources[3].path`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// Parses and validates a declaration for a given source.
pub fn parse(text: &str, source: Source) -> Result<Declaration, Problems> {
    // JSON lets a key be given twice and a parser keep the last: a declaration that says two
    // things at one path is refused rather than read as whichever came last. Both found in the
    // one pass that reads the document.
    let (value, mut problems) = keys::document(text).map_err(|e| {
        Problems(vec![Problem {
            path: String::new(),
            message: format!("not valid JSON: {e}"),
        }])
    })?;
    problems.extend(walked(&value, source));
    if !problems.is_empty() {
        return Err(Problems(problems));
    }
    // The document is this call's own: its strings move into the declaration, not copied.
    typed(super::resource_de::declaration(value))
}

/// Validates an already parsed JSON document, naming every problem.
pub fn validate_value(value: &Value, source: Source) -> Result<Declaration, Problems> {
    let problems = walked(value, source);
    if !problems.is_empty() {
        return Err(Problems(problems));
    }
    // Read from the value where it stands: a clone of a 10,000-opening document cost more
    // than reading it.
    typed(<Declaration as serde::Deserialize>::deserialize(value))
}

/// Every problem the walker finds in the document.
fn walked(value: &Value, source: Source) -> Vec<Problem> {
    let mut v = Walker::default();
    v.document(value, source);
    v.problems
}

/// The declaration the types read from a document the walker passed.
fn typed(read: Result<Declaration, serde_json::Error>) -> Result<Declaration, Problems> {
    read.map_err(|e| {
        // The walker and the types describe the same document; reaching here is a bug in one of
        // them, and it still refuses rather than applying half a document.
        Problems(vec![Problem {
            path: String::new(),
            message: format!("declaration does not match its types: {e}"),
        }])
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[derive(Default)]
struct Walker {
    problems: Vec<Problem>,
    /// The guard the settings call for, once they are read: openings are checked against it.
    guarded: Option<guarded::Guarded>,
}

const FILE_FIELDS: &[&str] = &[
    "path",
    "content",
    "content_base64",
    "mode",
    "owner",
    "group",
    "create_once",
];
const DIRECTORY_FIELDS: &[&str] = &["path", "mode", "owner", "group"];
const SERVICE_FIELDS: &[&str] = &["name", "state", "enabled"];
const PACKAGE_FIELDS: &[&str] = &["name", "version"];
const CONTAINER_FIELDS: &[&str] = &[
    "name", "image", "command", "env", "ports", "restart", "networks",
];
const ACTION_FIELDS: &[&str] = &["run", "verify"];
const OPENING_FIELDS: &[&str] = &["port", "proto", "from", "path"];

impl Walker {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Checks that `v` is an object with no unknown and no missing fields.
    fn object<'a>(
        &mut self,
        v: &'a Value,
        path: &str,
        allowed: &[&str],
        required: &[&str],
    ) -> Option<&'a Map<String, Value>> {
        let Some(map) = v.as_object() else {
            self.err(path, format!("must be an object, found {}", type_name(v)));
            return None;
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                self.err(join(path, key), "unknown field");
            }
        }
        for key in required {
            if !map.contains_key(*key) {
                self.err(join(path, key), "is required");
            }
        }
        Some(map)
    }

    fn string<'a>(
        &mut self,
        map: &'a Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<&'a str> {
        let v = map.get(key)?;
        match v.as_str() {
            Some(s) => Some(s),
            None => {
                self.err(
                    join(path, key),
                    format!("must be a string, found {}", type_name(v)),
                );
                None
            }
        }
    }

    fn boolean(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<bool> {
        let v = map.get(key)?;
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                self.err(
                    join(path, key),
                    format!("must be a boolean, found {}", type_name(v)),
                );
                None
            }
        }
    }

    fn port(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<u16> {
        let v = map.get(key)?;
        match v.as_u64() {
            Some(n) if (1..=65535).contains(&n) => Some(n as u16),
            Some(n) => {
                self.err(join(path, key), format!("port {n} is outside 1-65535"));
                None
            }
            None if v.is_number() => {
                self.err(join(path, key), format!("port {v} is outside 1-65535"));
                None
            }
            None => {
                self.err(
                    join(path, key),
                    format!("must be a port number, found {}", type_name(v)),
                );
                None
            }
        }
    }

    fn one_of(&mut self, map: &Map<String, Value>, key: &str, path: &str, options: &[&str]) {
        if let Some(s) = self.string(map, key, path) {
            if !options.contains(&s) {
                self.err(
                    join(path, key),
                    format!("must be one of {}, found {s:?}", options.join(", ")),
                );
            }
        }
    }

    /// An array of strings; each element checked by `check`.
    fn strings(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        check: impl Fn(&str) -> Result<(), Invalid>,
    ) -> Option<Vec<String>> {
        let v = map.get(key)?;
        let p = join(path, key);
        let Some(items) = v.as_array() else {
            self.err(
                p,
                format!("must be an array of strings, found {}", type_name(v)),
            );
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ip = format!("{p}[{i}]");
            match item.as_str() {
                Some(s) => match check(s) {
                    Ok(()) => out.push(s.to_string()),
                    Err(m) => self.err(ip, m.0),
                },
                None => self.err(ip, format!("must be a string, found {}", type_name(item))),
            }
        }
        Some(out)
    }

    fn checked(&mut self, path: String, result: Result<(), Invalid>) {
        if let Err(m) = result {
            self.err(path, m.0);
        }
    }

    fn document(&mut self, value: &Value, source: Source) {
        let top = &[
            "version",
            "node",
            "mode",
            "taken",
            "settings",
            "resources",
            "release",
            "recovered",
        ];
        let Some(map) = self.object(value, "", top, &["version", "node", "mode", "resources"])
        else {
            return;
        };
        if let Some(v) = map.get("version") {
            if v.as_u64() != Some(FORMAT_VERSION as u64) {
                self.err("version", format!("must be {FORMAT_VERSION}, found {v}"));
            }
        }
        if let Some(node) = self.string(map, "node", "") {
            self.checked("node".into(), check_node_name(node));
        }
        self.one_of(map, "mode", "", &["adopted", "converged"]);
        if let Some(taken) = self.strings(map, "taken", "", check_module_name) {
            let mut seen = BTreeSet::new();
            for (i, m) in taken.iter().enumerate() {
                if !seen.insert(m) {
                    self.err(
                        format!("taken[{i}]"),
                        format!("module {m:?} is named twice"),
                    );
                }
            }
        }
        let has_private = match map.get("settings") {
            Some(s) => self.settings(s),
            None => false,
        };
        if self.boolean(map, "release", "") == Some(true) {
            self.release(map, source);
        }
        if let Some(recovered) = map.get("recovered") {
            self.recovered(recovered);
        }
        if let Some(resources) = map.get("resources") {
            match resources.as_array() {
                Some(items) => self.resources(items, source, has_private),
                None => self.err(
                    "resources",
                    format!("must be an array, found {}", type_name(resources)),
                ),
            }
        }
    }

    /// Returns whether a private network is described, which `from: private` needs.
    fn settings(&mut self, v: &Value) -> bool {
        let keys = [
            "ports",
            "private_network",
            "deadlines",
            "originals_limit_bytes",
            "found_read_limit_bytes",
            "found_read_s",
        ];
        let Some(map) = self.object(v, "settings", &keys, &["ports"]) else {
            return false;
        };
        if let Some(d) = map.get("deadlines") {
            self.deadlines(d);
        }
        // The largest found file saved whole as an original, and the largest file read whole:
        // whole numbers of bytes.
        for name in ["originals_limit_bytes", "found_read_limit_bytes"] {
            if let Some(l) = map.get(name).filter(|l| l.as_u64().is_none()) {
                self.err(
                    format!("settings.{name}"),
                    format!("must be a whole number of bytes, found {}", type_name(l)),
                );
            }
        }
        // How long one whole read of a found file may take: as a deadline, 1 s to a day.
        if let Some(v) = map
            .get("found_read_s")
            .filter(|v| !v.as_u64().is_some_and(|n| (1..=86_400).contains(&n)))
        {
            let found = if v.is_number() {
                v.to_string()
            } else {
                type_name(v).to_string()
            };
            self.err(
                "settings.found_read_s",
                format!("must be a whole number of seconds from 1 to 86400, found {found}"),
            );
        }
        if let Some(ports) = map.get("ports") {
            let names = ["store", "bus", "broker_management", "registry", "hub"];
            if let Some(pm) = self.object(ports, "settings.ports", &names, &names) {
                let mut by_port: BTreeMap<u16, &str> = BTreeMap::new();
                let mut guarded = guarded::Guarded::default();
                for name in names {
                    if let Some(p) = self.port(pm, name, "settings.ports") {
                        if matches!(name, "store" | "broker_management") {
                            guarded.ports.push((p, name));
                        }
                        if let Some(other) = by_port.insert(p, name) {
                            self.err(
                                format!("settings.ports.{name}"),
                                format!("port {p} is already the {other} port"),
                            );
                        }
                    }
                }
                self.guarded = Some(guarded);
            }
        }
        let Some(pn) = map.get("private_network") else {
            return false;
        };
        let path = "settings.private_network";
        let Some(pm) = self.object(
            pn,
            path,
            &["interface", "range", "range_v6"],
            &["interface", "range"],
        ) else {
            return false;
        };
        if let Some(i) = self.string(pm, "interface", path) {
            self.checked(join(path, "interface"), check_interface(i));
        }
        let mut v4 = false;
        if let Some(r) = self.string(pm, "range", path) {
            let range = parse_cidr(r, false);
            if let (Some(g), Ok(range)) = (self.guarded.as_mut(), &range) {
                g.private.push(*range);
            }
            v4 = matches!(range, Ok((std::net::IpAddr::V4(_), _)));
            self.checked(join(path, "range"), range.map(|_| ()));
        }
        if pm.contains_key("range_v6") {
            if let Some(r) = self.string(pm, "range_v6", path) {
                let range = parse_cidr(r, false).and_then(|(a, l)| match a {
                    std::net::IpAddr::V6(_) if v4 => Ok((a, l)),
                    std::net::IpAddr::V6(_) => Err(Invalid(format!(
                        "{r:?} is given beside an IPv6 range; range_v6 is the IPv6 range of a \
                         network whose range is IPv4"
                    ))),
                    std::net::IpAddr::V4(_) => Err(Invalid(format!(
                        "{r:?} is not an IPv6 network; the IPv4 range goes in range"
                    ))),
                });
                if let (Some(g), Ok(range)) = (self.guarded.as_mut(), &range) {
                    g.private.push(*range);
                }
                self.checked(join(path, "range_v6"), range.map(|_| ()));
            }
        }
        true
    }

    /// `settings.deadlines`: whole seconds from one second to a day, per kind of call.
    fn deadlines(&mut self, v: &Value) {
        let path = "settings.deadlines";
        let names = [
            "query_s",
            "container_s",
            "service_s",
            "package_s",
            "firewall_s",
            "action_s",
        ];
        let Some(map) = self.object(v, path, &names, &[]) else {
            return;
        };
        for (name, v) in map.iter().filter(|(k, _)| names.contains(&k.as_str())) {
            if v.as_u64().is_some_and(|n| (1..=86_400).contains(&n)) {
                continue;
            }
            let found = if v.is_number() {
                v.to_string()
            } else {
                type_name(v).to_string()
            };
            self.err(
                join(path, name),
                format!("must be a whole number of seconds from 1 to 86400, found {found}"),
            );
        }
    }

    fn resources(&mut self, items: &[Value], source: Source, has_private: bool) {
        let mut ids: BTreeMap<String, usize> = BTreeMap::new();
        let mut keys: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("resources[{i}]");
            let Some(map) = item.as_object() else {
                self.err(
                    path,
                    format!("must be an object, found {}", type_name(item)),
                );
                continue;
            };
            let shape = match map.get("type") {
                None => {
                    self.err(join(&path, "type"), "is required");
                    None
                }
                Some(Value::String(t)) => match super::Shape::from_name(t) {
                    Some(s) => Some(s),
                    None => {
                        self.err(
                            join(&path, "type"),
                            format!(
                                "unknown type {t:?}; this host knows file, directory, service, \
                                 package, container, action, opening"
                            ),
                        );
                        None
                    }
                },
                Some(other) => {
                    self.err(
                        join(&path, "type"),
                        format!("must be a string, found {}", type_name(other)),
                    );
                    None
                }
            };
            if let Some(id) = self.string(map, "id", &path) {
                match check_id(id) {
                    Err(m) => self.err(join(&path, "id"), m.0),
                    Ok(()) => {
                        if let Some(first) = ids.insert(id.to_string(), i) {
                            self.err(
                                join(&path, "id"),
                                format!("duplicate id {id:?}, first used by resources[{first}]"),
                            );
                        }
                    }
                }
            } else if !map.contains_key("id") {
                self.err(join(&path, "id"), "is required");
            }
            if let Some(m) = self.string(map, "module", &path) {
                self.checked(join(&path, "module"), check_module_name(m));
            }
            let Some(shape) = shape else {
                // Without a known type the other fields cannot be judged; the type's problem
                // is already named.
                continue;
            };
            // A host built for a system without the means to implement a shape refuses it,
            // as it refuses an unknown type, with the reason.
            if let Some(why) = crate::build::BUILD.refusal(shape) {
                self.err(join(&path, "type"), why);
            }
            use super::Shape::*;
            let (own, required): (&[&str], &[&str]) = match shape {
                File => (FILE_FIELDS, &["path"]),
                Directory => (DIRECTORY_FIELDS, &["path"]),
                Service => (SERVICE_FIELDS, &["name", "state", "enabled"]),
                Package => (PACKAGE_FIELDS, &["name"]),
                Container => (CONTAINER_FIELDS, &["name", "image"]),
                Action => (ACTION_FIELDS, &["run", "verify"]),
                Opening => (OPENING_FIELDS, &["port", "proto", "from", "path"]),
            };
            let mut allowed = vec!["id", "module", "type"];
            allowed.extend_from_slice(own);
            let mut req = vec!["id"];
            req.extend_from_slice(required);
            // Missing id was reported above; avoid naming it twice.
            req.retain(|k| *k != "id");
            self.object(item, &path, &allowed, &req);
            let key = match shape {
                File => self.file(map, &path),
                Directory => self.directory(map, &path),
                Service => self.service(map, &path),
                Package => self.package(map, &path),
                Container => self.container(map, &path),
                Action => {
                    self.action(map, &path, source);
                    None
                }
                Opening => {
                    self.opening(map, &path, has_private);
                    None
                }
            };
            if let Some(key) = key {
                let class = match shape {
                    File | Directory => "path".to_string(),
                    other => other.as_str().to_string(),
                };
                if let Some(first) = keys.insert((class, key.clone()), i) {
                    self.err(
                        &path,
                        format!("{key:?} is already declared by resources[{first}]"),
                    );
                }
            }
        }
    }
}

mod guarded;
mod keys;
mod own;
mod recovered;
mod release;
mod root;
mod shapes;
mod values;
pub use own::*;
pub use root::under_root;
pub use values::*;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
