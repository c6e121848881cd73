//! The openings engine: the one function that derives what must be reachable on a node from the
//! node's settings and the listens of the modules assigned there, each from where the filter
//! would admit it. Genesis uses it for the foundation; the derived filter uses the same function,
//! so the two can never disagree.

use crate::opening::{From, Opening, Path, Proto};

/// Every port the foundation binds on a node, as its settings give them: the inputs of genesis
/// that outlive it. The catalogue's numbers are only the defaults. The one definition the core's
/// settings, genesis and the openings engine share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
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

    /// The port named `name` (`broker-management` or `broker_management`), to set it.
    pub fn slot(&mut self, name: &str) -> Option<&mut u16> {
        Some(match name {
            "store" => &mut self.store,
            "bus" => &mut self.bus,
            "broker-management" | "broker_management" => &mut self.broker_management,
            "registry" => &mut self.registry,
            "hub" => &mut self.hub,
            _ => return None,
        })
    }
}

/// One thing a module listens on, as the module declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// The id its opening gets (a module's own naming, e.g. `proxy/https`).
    pub id: String,
    pub port: u16,
    pub proto: Proto,
    pub from: From,
    pub path: Path,
}

/// Everything the openings are derived from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs<'a> {
    pub ports: FoundationPorts,
    /// The private network's interface; the store and the broker's management port are
    /// admitted only from it.
    pub private_interface: &'a str,
    pub listens: &'a [Listen],
}

/// The openings a node needs, in a stable order: the foundation's, then each listen as declared,
/// each id once.
///
/// - the private network's hub port (UDP, received by the machine) from anywhere: a node reaches
///   the hub before it has a private-network address;
/// - the bus and the registry (published container ports, so forwarded) from anywhere: a node
///   enrols over the bus and pulls from the registry before it has a private-network address;
/// - the store's port and the broker's management port (forwarded) from the private network only.
pub fn derive(inputs: &Inputs<'_>) -> Vec<Opening> {
    let p = inputs.ports;
    let private = || From::Interface(inputs.private_interface.to_string());
    let mut out = vec![
        Opening {
            id: "hub/port".into(),
            port: p.hub,
            proto: Proto::Udp,
            from: From::Anywhere,
            path: Path::Incoming,
        },
        Opening {
            id: "broker/bus".into(),
            port: p.bus,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Forwarded,
        },
        Opening {
            id: "registry/port".into(),
            port: p.registry,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Forwarded,
        },
        Opening {
            id: "store/port".into(),
            port: p.store,
            proto: Proto::Tcp,
            from: private(),
            path: Path::Forwarded,
        },
        Opening {
            id: "broker/management".into(),
            port: p.broker_management,
            proto: Proto::Tcp,
            from: private(),
            path: Path::Forwarded,
        },
    ];
    // Each id once: a listen declared under a foundation opening's id (a declaration that already
    // holds what an earlier derivation gave it) takes that opening's place, as declared; a second
    // listen of an id is the first one's twin and is left out. Pasted into a declaration, the
    // list is never refused for duplicate ids.
    let foundation = out.len();
    for l in inputs.listens {
        let o = Opening {
            id: l.id.clone(),
            port: l.port,
            proto: l.proto,
            from: l.from.clone(),
            path: l.path,
        };
        match out.iter().position(|f| f.id == o.id) {
            Some(i) if i < foundation => out[i] = o,
            Some(_) => {}
            None => out.push(o),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_foundation_and_each_listen_are_derived_from_the_settings() {
        let ports = FoundationPorts {
            store: 15432,
            bus: 5672,
            broker_management: 15672,
            registry: 5001,
            hub: 51820,
        };
        let listens = [Listen {
            id: "proxy/https".into(),
            port: 443,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Forwarded,
        }];
        let got = derive(&Inputs {
            ports,
            private_interface: "mesh0",
            listens: &listens,
        });
        let by_id = |id: &str| got.iter().find(|o| o.id == id).unwrap().clone();
        assert_eq!(
            by_id("store/port").port,
            15432,
            "the store's port is the node's setting"
        );
        assert_eq!(by_id("store/port").from, From::Interface("mesh0".into()));
        assert_eq!(
            by_id("broker/management").from,
            From::Interface("mesh0".into())
        );
        assert_eq!(by_id("registry/port").port, 5001);
        assert_eq!(by_id("registry/port").from, From::Anywhere);
        assert_eq!(by_id("broker/bus").from, From::Anywhere);
        assert_eq!(by_id("hub/port").proto, Proto::Udp);
        assert_eq!(by_id("proxy/https").port, 443);
        assert_eq!(got.len(), 6);
        for o in &got {
            o.validate().unwrap();
        }
    }

    #[test]
    fn a_listen_under_a_foundation_id_takes_its_place_and_each_id_is_given_once() {
        let ports = FoundationPorts {
            store: 5432,
            bus: 5672,
            broker_management: 15672,
            registry: 5000,
            hub: 51820,
        };
        // What a node's declaration holds after `openings derive` was pasted into it: the
        // foundation's openings as declared (the store's narrowed to a network), and one twice.
        let store = Listen {
            id: "store/port".into(),
            port: 5432,
            proto: Proto::Tcp,
            from: From::Networks(vec![crate::Network {
                addr: "10.77.0.0".parse().unwrap(),
                len: 24,
            }]),
            path: Path::Forwarded,
        };
        let web = Listen {
            id: "web/https".into(),
            port: 443,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Incoming,
        };
        let listens = [store.clone(), web.clone(), web];
        let got = derive(&Inputs {
            ports,
            private_interface: "mesh0",
            listens: &listens,
        });
        let ids: Vec<&str> = got.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "hub/port",
                "broker/bus",
                "registry/port",
                "store/port",
                "broker/management",
                "web/https"
            ]
        );
        assert_eq!(got[3].from, store.from, "the declared store opening stands");
    }
}
