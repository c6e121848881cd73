//! The foundation's ports: the inputs of genesis that outlive it as the node's settings.

use std::fmt;

/// The private network's interface when genesis is not told another.
pub const DEFAULT_PRIVATE_INTERFACE: &str = "mesh0";

/// The private network's range when genesis is not told another.
pub const DEFAULT_PRIVATE_RANGE: &str = "10.77.0.0/24";

/// A transport protocol, as the foundation binds a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every port the foundation binds on a node. The catalogue's numbers are only the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundationPorts {
    pub store: u16,
    pub bus: u16,
    pub broker_management: u16,
    pub registry: u16,
    pub hub: u16,
}

impl Default for FoundationPorts {
    fn default() -> Self {
        FoundationPorts {
            store: 5432,
            bus: 5672,
            broker_management: 15672,
            registry: 5000,
            hub: 51820,
        }
    }
}

impl FoundationPorts {
    /// Each port with its name (as `--ports` spells it) and the protocol the foundation binds.
    pub fn each(&self) -> [(&'static str, u16, Proto); 5] {
        [
            ("store", self.store, Proto::Tcp),
            ("bus", self.bus, Proto::Tcp),
            ("broker-management", self.broker_management, Proto::Tcp),
            ("registry", self.registry, Proto::Tcp),
            ("hub", self.hub, Proto::Udp),
        ]
    }

    fn slot(&mut self, name: &str) -> Option<&mut u16> {
        Some(match name {
            "store" => &mut self.store,
            "bus" => &mut self.bus,
            "broker-management" | "broker_management" => &mut self.broker_management,
            "registry" => &mut self.registry,
            "hub" => &mut self.hub,
            _ => return None,
        })
    }

    /// Applies `--ports store=5432,registry=5001,…` over these ports, naming every problem.
    pub fn with_overrides(mut self, spec: &str) -> Result<FoundationPorts, Vec<String>> {
        let mut problems = Vec::new();
        let mut given: Vec<&str> = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, value)) = item.split_once('=') else {
                problems.push(format!("--ports: {item:?} is not NAME=PORT"));
                continue;
            };
            if given.contains(&name) {
                problems.push(format!("--ports: {name} is given twice"));
                continue;
            }
            given.push(name);
            let port = match value.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => {
                    problems.push(format!("--ports: {name}={value}: port must be 1-65535"));
                    continue;
                }
            };
            match self.slot(name) {
                Some(slot) => *slot = port,
                None => problems.push(format!(
                    "--ports: unknown port {name:?}; the foundation's ports are store, bus, broker-management, registry, hub"
                )),
            }
        }
        let each = self.each();
        // Every foundation port is distinct, whatever its protocol: the node's settings refuse
        // two of one number, so `--ports` does too, naming itself rather than the bundle.
        for (i, (a, pa, _)) in each.iter().enumerate() {
            for (b, pb, _) in &each[i + 1..] {
                if pa == pb {
                    problems.push(format!("--ports: {a} and {b} are both port {pa}"));
                }
            }
        }
        if problems.is_empty() {
            Ok(self)
        } else {
            Err(problems)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_is_given() {
        let p = FoundationPorts::default()
            .with_overrides("registry=5001, store=15432")
            .unwrap();
        assert_eq!(p.registry, 5001);
        assert_eq!(p.store, 15432);
        assert_eq!(p.bus, 5672);
    }

    #[test]
    fn ports_are_distinct_across_protocols() {
        let e = FoundationPorts::default()
            .with_overrides("hub=5432")
            .unwrap_err();
        assert_eq!(
            e,
            vec!["--ports: store and hub are both port 5432".to_string()]
        );
    }

    #[test]
    fn every_problem_is_named() {
        let e = FoundationPorts::default()
            .with_overrides("registry=0,nope=1,bus,store=5672")
            .unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].contains("registry=0"));
        assert!(e[1].contains("unknown port \"nope\""));
        assert!(e[2].contains("\"bus\" is not NAME=PORT"));
        assert!(e[3].contains("store and bus are both port 5672"));
    }
}
