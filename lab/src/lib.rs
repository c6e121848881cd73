//! The lab: machines as network namespaces with real firewalls and a real Docker engine, and probes.
//!
//! A [`Lab`] makes named network namespaces (`mh-<pid>-<n>-<machine>`) joined by veth pairs or a
//! [`Switch`] (a namespace holding a bridge); [`Machine`] runs commands inside one through
//! `nsenter --net`, starts background processes and listeners, and probes other machines with real
//! TCP and UDP exchanges made from a thread that joined its namespace. [`Adoption`] builds the
//! ready topology of the adoption ADR (node, outside, peer), and [`Machine::start_docker`] runs a
//! real Docker engine inside a machine. [`Bed`] prepares on that topology the machine ADR 0100's
//! checks run on, with a found firewall of each [`FoundKind`]. Everything is removed when the lab
//! drops, and [`Lab::sweep_stale`] removes what crashed runs left.
//!
//! For the link there is a real RabbitMQ broker with TLS ([`Rabbit`]), the controller's stand-in
//! ([`Controller`]: tokens, signed declarations, verified reports), and [`Relay`] and [`Hung`] to
//! give a node in a namespace a path to the broker that can be cut, or one that never answers;
//! [`Nameserver`] (dnsmasq) names the broker for a node that is given it by host name.
//!
//! The lab needs root, `iproute2` and `util-linux` (`nsenter`); listeners need `busybox-static`;
//! the Docker engine needs `docker.io`. A missing prerequisite is an error, never a silent skip.
//!
//! One engine shared by every test of a binary (Docker is slow to start on two cores): the lab is
//! kept until the process exits, and torn down then.
//!
//! ```no_run
//! use std::sync::OnceLock;
//! use std::time::Duration;
//! use lab::{addr, Adoption, Docker, Lab, Probe};
//!
//! fn shared() -> &'static (Adoption, Docker) {
//!     static SHARED: OnceLock<(Adoption, Docker)> = OnceLock::new();
//!     SHARED.get_or_init(|| {
//!         let lab = Lab::new().expect("lab").until_exit();
//!         let net = Adoption::build(lab).expect("topology");
//!         let docker = net.node.start_docker(&lab.dir().join("docker")).expect("docker");
//!         (net, docker)
//!     })
//! }
//!
//! let (net, docker) = shared();
//! docker.run_container("web", &["-p", "8082:80"], &["/bin/httpd", "-f", "-p", "80", "-h", "/www"])?;
//! let seen = net.outside.probe_tcp(addr::NODE_PUBLIC_V4.into(), 8082, Duration::from_secs(2))?;
//! assert_eq!(seen, Probe::Reached);
//! # Ok::<(), lab::Error>(())
//! ```

mod bed;
mod broker;
mod controller;
mod docker;
mod error;
mod exec;
mod fixtures;
mod found;
mod kinds;
mod lab;
mod machine;
mod nameserver;
mod netns;
mod probe;
mod relay;
mod topology;
mod units;

pub use crate::{
    bed::{
        module_resources, ports, serve, stand_in_bundle, Bed, FILE_MODULE, FILE_MODULE_FILE,
        HELD_FILE, OLD_REGISTRY, SERVICE_MODULE, UNDECLARED_CONTAINER,
    },
    broker::{free_port, Ctl, Rabbit, ADMIN_USER},
    controller::{node_definitions, password_hash, Controller, Issued, Upward},
    docker::{Docker, EngineOptions, BUSYBOX_IMAGE},
    error::{Error, Result},
    exec::{run, run_ok, Output, Process, DEFAULT_TIMEOUT},
    fixtures::{fixture, fixtures_dir},
    found::{Firewalld, FirewalldProgram, Ufw},
    kinds::{FoundFirewall, FoundKind, Live, Policy},
    lab::{Lab, SweepReport, Switch, LAB_ROOT, PREFIX_STEM},
    machine::Machine,
    nameserver::Nameserver,
    netns::NETNS_DIR,
    probe::{Probe, UdpEcho},
    relay::{Hung, Relay},
    topology::{addr, Adoption},
    units::StubSystemctl,
};
