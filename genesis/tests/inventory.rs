//! The inventory read from a real kernel: each test runs on a thread that unshared a fresh network
//! namespace, so what it finds is exactly what the test made there. Needs root, iproute2,
//! busybox and /dev/net/tun.

use std::collections::BTreeSet;
use std::net::{IpAddr, TcpListener, TcpStream, UdpSocket};
use std::panic::resume_unwind;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use genesis::inventory::{Interface, InterfaceKind, Inventory, Listener, Proto, Route};

/// Runs `f` on a thread that has just unshared a fresh network namespace with `lo` up. Child
/// processes started from that thread inherit its namespace; the namespace goes with the thread.
fn in_fresh_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    thread::scope(|scope| {
        scope
            .spawn(|| {
                // Only the calling thread's namespace changes.
                if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                    panic!("unshare(CLONE_NEWNET) failed (these tests need root): {e}");
                }
                ip(&["link", "set", "lo", "up"]);
                f()
            })
            .join()
            .unwrap_or_else(|panic| resume_unwind(panic))
    })
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child process killed and reaped on drop, even when an assertion fails first.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read_until(what: &str, ready: impl Fn(&Inventory) -> bool) -> Inventory {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let inventory = Inventory::read().expect("reading the inventory");
        if ready(&inventory) {
            return inventory;
        }
        assert!(
            Instant::now() < deadline,
            "{what} never appeared: {inventory:#?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap()
        .trim_end()
        .to_owned()
}

fn shown(listener: &Listener) -> (Proto, IpAddr, u16) {
    (listener.protocol, listener.address, listener.port)
}

#[test]
fn listeners_are_listed_with_their_process_id_and_name() {
    // Held in the host's namespace: the inventory of the fresh one must not list it.
    let host_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_listener.local_addr().unwrap().port();

    in_fresh_netns(|| {
        let _tcp4 = TcpListener::bind("127.0.0.1:7001").unwrap();
        let _tcp6 = TcpListener::bind("[::]:7002").unwrap();
        let _udp4 = UdpSocket::bind("0.0.0.0:7003").unwrap();
        let _udp6 = UdpSocket::bind("[::1]:7004").unwrap();
        // Neither a connected UDP socket nor an accepted TCP connection is a listener.
        let connected = UdpSocket::bind("127.0.0.1:7006").unwrap();
        connected.connect("127.0.0.1:7003").unwrap();
        let _client = TcpStream::connect("127.0.0.1:7001").unwrap();
        let httpd = Reaped(
            Command::new("busybox")
                .args(["httpd", "-f", "-p", "7005", "-h", "/"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting busybox httpd (busybox-static)"),
        );
        let inventory = read_until("busybox httpd on port 7005", |inv| {
            !inv.holding(Proto::Tcp, 7005).is_empty()
        });

        let got: BTreeSet<_> = inventory.listeners.iter().map(shown).collect();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let expected = BTreeSet::from([
            (Proto::Tcp, ip("127.0.0.1"), 7001),
            (Proto::Tcp, ip("::"), 7002),
            (Proto::Tcp, ip("::"), 7005),
            (Proto::Udp, ip("0.0.0.0"), 7003),
            (Proto::Udp, ip("::1"), 7004),
        ]);
        assert_eq!(got, expected, "{inventory:#?}");
        assert!(inventory.holding(Proto::Tcp, host_port).is_empty());

        let me = std::process::id();
        let my_name = comm(me);
        for port in [7001, 7002, 7003, 7004] {
            let listener = inventory.listeners.iter().find(|l| l.port == port).unwrap();
            // Another test thread forking a child can show up as a second owner for the instant
            // between fork and exec (the descriptor is close-on-exec): this process must be there.
            assert!(
                listener
                    .owners
                    .iter()
                    .any(|o| o.pid == me && o.name == my_name),
                "{listener:?} is not owned by {my_name}({me})"
            );
            assert_ne!(listener.inode, 0);
        }
        let held = inventory.holding(Proto::Tcp, 7005);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].owners.len(), 1, "{:?}", held[0]);
        assert_eq!(held[0].owners[0].pid, httpd.0.id());
        assert_eq!(held[0].owners[0].name, "busybox");
        assert_eq!(
            held[0].to_string(),
            format!("tcp [::]:7005 busybox({})", httpd.0.id())
        );
    });
    drop(host_listener);
}

#[test]
fn interfaces_are_listed_with_their_kind_addresses_and_routes() {
    in_fresh_netns(|| {
        ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
        ip(&["tuntap", "add", "dev", "tun0", "mode", "tun"]);
        ip(&["tuntap", "add", "dev", "tap0", "mode", "tap"]);
        ip(&["link", "add", "br0", "type", "bridge"]);
        ip(&["link", "set", "v1", "master", "br0"]);
        ip(&["address", "add", "192.0.2.1/24", "dev", "v0"]);
        ip(&["address", "add", "2001:db8::1/64", "dev", "v0", "nodad"]);
        for link in ["v0", "v1", "br0"] {
            ip(&["link", "set", link, "up"]);
        }
        ip(&["route", "add", "198.51.100.0/24", "via", "192.0.2.254"]);
        ip(&[
            "-6",
            "route",
            "add",
            "2001:db8:5::/64",
            "via",
            "2001:db8::fe",
        ]);

        let inventory = Inventory::read().expect("reading the inventory");
        let names: BTreeSet<&str> = inventory
            .interfaces
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        // Exactly this namespace's interfaces: none of the host's leak in.
        assert_eq!(
            names,
            BTreeSet::from(["lo", "v0", "v1", "tun0", "tap0", "br0"])
        );
        let get = |name: &str| -> &Interface { inventory.interface(name).unwrap() };
        let kinds = [
            ("lo", InterfaceKind::Loopback),
            ("v0", InterfaceKind::Veth),
            ("v1", InterfaceKind::Veth),
            ("tun0", InterfaceKind::Tun),
            ("tap0", InterfaceKind::Tap),
            ("br0", InterfaceKind::Bridge),
        ];
        for (name, kind) in kinds {
            assert_eq!(get(name).kind, kind, "{:?}", get(name));
        }
        assert!(get("lo").up && get("v0").up && !get("tun0").up);
        assert_eq!(get("v1").master.as_deref(), Some("br0"));
        assert_eq!(get("v0").master, None);
        assert!(get("v0").mac.as_ref().is_some_and(|m| m.len() == 17));
        assert_eq!(get("tun0").mac, None);
        assert_eq!(get("lo").mtu, 65536);

        let addresses = |name: &str| -> Vec<String> {
            get(name)
                .addresses
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(addresses("lo"), ["127.0.0.1/8", "::1/128"]);
        let v0 = addresses("v0");
        assert_eq!(v0[..2], ["192.0.2.1/24", "2001:db8::1/64"]);
        // The kernel may add the link-local address a moment after the link comes up.
        assert!(v0[2..].iter().all(|a| a.starts_with("fe80::")), "{v0:?}");
        assert!(addresses("tun0").is_empty());

        let routes: Vec<String> = inventory.routes.iter().map(Route::to_string).collect();
        for expected in [
            "192.0.2.0/24 dev v0 metric 0",
            "198.51.100.0/24 via 192.0.2.254 dev v0 metric 0",
            "2001:db8::/64 dev v0 metric 256",
            "2001:db8:5::/64 via 2001:db8::fe dev v0 metric 1024",
        ] {
            assert!(
                routes.iter().any(|r| r == expected),
                "{expected} missing from {routes:#?}"
            );
        }
        // Only routes over this namespace's interfaces, and none of the kernel's local entries.
        assert!(routes.iter().all(|r| !r.contains("dev lo")), "{routes:#?}");
        assert!(inventory
            .routes
            .iter()
            .all(|r| names.contains(r.interface.as_str())));
    });
}

#[test]
fn an_empty_namespace_has_only_loopback_and_nothing_listening() {
    in_fresh_netns(|| {
        let inventory = Inventory::read().expect("reading the inventory");
        assert_eq!(inventory.listeners, []);
        assert_eq!(inventory.interfaces.len(), 1);
        assert_eq!(inventory.interfaces[0].kind, InterfaceKind::Loopback);
        assert_eq!(inventory.routes, []);
    });
}
