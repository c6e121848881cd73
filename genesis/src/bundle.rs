//! The bundle: the declaration the binary carries to raise the foundation, with every port a
//! reference to the node's settings, resolved by genesis.
//!
//! A reference is either a JSON object `{"$setting": "ports.store"}` standing in for a value, or
//! `${ports.store}` inside a string. Genesis resolves them against the ports it was given, so the
//! foundation's containers, published ports and openings all read the node's settings and never
//! the catalogue's numbers.

use crate::ports::FoundationPorts;
use serde_json::Value;

/// The foundation bundle carried in the binary.
pub const EMBEDDED: &str = include_str!("../bundle/foundation.json");

/// What references resolve to.
#[derive(Debug, Clone)]
pub struct Values<'a> {
    pub node: &'a str,
    pub mode: &'a str,
    pub ports: FoundationPorts,
    pub private_interface: &'a str,
    pub private_range: &'a str,
}

impl Values<'_> {
    fn lookup(&self, name: &str) -> Option<Value> {
        let p = &self.ports;
        Some(match name {
            "node" => Value::from(self.node),
            "mode" => Value::from(self.mode),
            "ports.store" => Value::from(p.store),
            "ports.bus" => Value::from(p.bus),
            "ports.broker_management" => Value::from(p.broker_management),
            "ports.registry" => Value::from(p.registry),
            "ports.hub" => Value::from(p.hub),
            "private_network.interface" => Value::from(self.private_interface),
            "private_network.range" => Value::from(self.private_range),
            _ => return None,
        })
    }
}

/// Resolves every reference in a bundle, naming every one it does not know (with its path).
pub fn resolve(text: &str, values: &Values<'_>) -> Result<Value, Vec<String>> {
    let mut v: Value =
        serde_json::from_str(text).map_err(|e| vec![format!("bundle is not valid JSON: {e}")])?;
    let mut problems = Vec::new();
    walk(&mut v, "", values, &mut problems);
    if problems.is_empty() {
        Ok(v)
    } else {
        Err(problems)
    }
}

fn walk(v: &mut Value, path: &str, values: &Values<'_>, problems: &mut Vec<String>) {
    if let Some(name) = v
        .as_object()
        .filter(|m| m.len() == 1)
        .and_then(|m| m.get("$setting"))
        .and_then(Value::as_str)
    {
        match values.lookup(name) {
            Some(x) => *v = x,
            None => problems.push(format!("bundle {path}: unknown setting {name:?}")),
        }
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(child, &p, values, problems);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                walk(child, &format!("{path}[{i}]"), values, problems);
            }
        }
        Value::String(s) if s.contains("${") => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(at) = rest.find("${") {
                out.push_str(&rest[..at]);
                let Some(end) = rest[at..].find('}') else {
                    problems.push(format!("bundle {path}: unterminated reference in {s:?}"));
                    return;
                };
                let name = &rest[at + 2..at + end];
                match values.lookup(name) {
                    Some(Value::String(x)) => out.push_str(&x),
                    Some(x) => out.push_str(&x.to_string()),
                    None => problems.push(format!("bundle {path}: unknown setting {name:?}")),
                }
                rest = &rest[at + end + 1..];
            }
            out.push_str(rest);
            *s = out;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(ports: FoundationPorts) -> Values<'static> {
        Values {
            node: "n1",
            mode: "adopted",
            ports,
            private_interface: "mesh0",
            private_range: "10.77.0.0/24",
        }
    }

    #[test]
    fn references_resolve_to_the_given_ports() {
        let ports = FoundationPorts {
            registry: 5001,
            ..FoundationPorts::default()
        };
        let v = resolve(r#"{"a": {"$setting": "ports.registry"}, "b": ["-p", "${ports.registry}:5000"], "n": "${node}"}"#, &values(ports)).unwrap();
        assert_eq!(v["a"], 5001);
        assert_eq!(v["b"][1], "5001:5000");
        assert_eq!(v["n"], "n1");
    }

    #[test]
    fn unknown_references_are_all_named() {
        let e = resolve(
            r#"{"a": {"$setting": "ports.nope"}, "b": "${x}"}"#,
            &values(FoundationPorts::default()),
        )
        .unwrap_err();
        assert_eq!(
            e,
            vec![
                "bundle a: unknown setting \"ports.nope\"".to_string(),
                "bundle b: unknown setting \"x\"".to_string()
            ]
        );
    }

    #[test]
    fn the_embedded_bundle_publishes_only_the_nodes_ports() {
        let given = FoundationPorts {
            store: 1,
            bus: 2,
            broker_management: 3,
            registry: 4,
            hub: 6,
        };
        let v = resolve(EMBEDDED, &values(given)).unwrap();
        let mut published = Vec::new();
        for r in v["resources"].as_array().unwrap() {
            for p in r["ports"].as_array().into_iter().flatten() {
                published.push(p["host_port"].as_u64().unwrap());
            }
        }
        published.sort();
        assert_eq!(
            published,
            vec![1, 2, 3, 4],
            "every published port is a setting"
        );
        assert_eq!(v["settings"]["ports"]["registry"], 4);
        assert_eq!(v["settings"]["ports"]["hub"], 6);
    }
}
