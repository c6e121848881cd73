//! A nameserver inside a lab machine: Debian's dnsmasq (`dnsmasq-base`) listening on one address
//! of the machine's loopback, port 53, answering the names it is given and NXDOMAIN for every
//! other name of its domain, with no upstream, no hosts file and every query logged. A node in
//! that machine whose `resolv.conf` names it resolves the broker by name through a real resolver.

use crate::error::{Error, Result};
use crate::exec::{require, Process};
use crate::machine::Machine;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A running dnsmasq, stopped when dropped.
pub struct Nameserver {
    process: Process,
    addr: IpAddr,
}

impl Nameserver {
    /// Starts dnsmasq in `machine` on `listen` (a loopback address such as `127.0.0.53`), port
    /// 53, authoritative for `domain` with `names` as its only records; waits until it answers.
    pub fn start(
        machine: &Machine,
        listen: IpAddr,
        domain: &str,
        names: &[(&str, IpAddr)],
    ) -> Result<Nameserver> {
        require("dnsmasq", "dnsmasq-base")?;
        let mut argv: Vec<String> = [
            "dnsmasq",
            "--keep-in-foreground",
            "--log-facility=-",
            "--log-queries",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--no-poll",
            "--bind-interfaces",
            "--port=53",
            "--pid-file=",
            "--user=root",
        ]
        .map(String::from)
        .to_vec();
        argv.push(format!("--listen-address={listen}"));
        argv.push(format!("--local=/{domain}/"));
        for (name, ip) in names {
            argv.push(format!("--host-record={name},{ip}"));
        }
        let mut process = machine.spawn(&argv)?;
        let waited = Duration::from_secs(10);
        let deadline = Instant::now() + waited;
        while !process.log().contains("started, version") {
            if !process.is_running() || Instant::now() > deadline {
                return Err(Error::NotReady {
                    namespace: machine.netns().to_string(),
                    what: format!("dnsmasq on {listen}"),
                    port: 53,
                    waited,
                    log: process.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Nameserver {
            process,
            addr: listen,
        })
    }

    /// The address it listens on (what a `resolv.conf` names).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Its log: one `query[A] NAME from ADDR` line per query, and what it answered.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Drop for Nameserver {
    fn drop(&mut self) {
        self.process.terminate(Duration::from_secs(5));
    }
}
