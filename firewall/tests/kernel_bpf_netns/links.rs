//! The guard layer's pinned program and links as the kernel holds them: an earlier version's
//! replaced with no window, each namespace's program its own, one set of four links per namespace
//! however often it is ensured (reclaimed, never duplicated), and what a node holds when its pins
//! are gone, read whole while another namespace's probes are attached and refused beside it.

use super::*;

#[test]
fn an_earlier_versions_pinned_program_is_replaced_with_no_window() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("upgrade");
    let pins = root.pins();
    // What an earlier version left pinned: the same maps and links, its program by another name.
    std::fs::create_dir_all(&pins.fs).unwrap();
    let out = std::process::Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(&pins.fs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::create_dir(&pins.dir).unwrap();
    let old_ids: Vec<u32> = net
        .node
        .in_namespace(|| {
            use firewall::bpf::{prog, sys};
            use std::os::fd::AsRawFd;
            let ports = sys::map_create("mh_guard_ports", 4, 1, 256).unwrap();
            let ifaces = sys::map_create("mh_guard_ifaces", 16, 4, 1024).unwrap();
            let nets = sys::map_create_lpm("mh_guard_nets", 24, 4, 64).unwrap();
            let layout = prog::Layout::from_btf(&bpf::btf::Btf::vmlinux().unwrap()).unwrap();
            let insns = prog::build(
                &layout,
                ports.as_raw_fd(),
                ifaces.as_raw_fd(),
                nets.as_raw_fd(),
                sys::netns_cookie().unwrap(),
            );
            let old = sys::prog_load_netfilter("mh_guard_v0", &insns).unwrap();
            let p = bpf::Program {
                prog: old,
                ports,
                ifaces,
                nets,
                layout: Some(layout),
            };
            p.set(&spec()).unwrap();
            for (fd, name) in [
                (&p.prog, "prog"),
                (&p.ports, "ports"),
                (&p.ifaces, "ifaces"),
                (&p.nets, "nets"),
            ] {
                sys::obj_pin(fd, &pins.dir.join(name)).unwrap();
            }
            let mut ids = Vec::new();
            for (pf, hook, name) in bpf::HOOKS {
                let link = sys::link_create_netfilter(
                    &p.prog,
                    pf,
                    hook,
                    bpf::PRIORITY,
                    bpf::F_NETFILTER_IP_DEFRAG,
                )
                .unwrap();
                sys::obj_pin(&link, &pins.dir.join(name)).unwrap();
                ids.push(sys::link_info(&link, name).unwrap().id);
            }
            ids
        })
        .unwrap();
    let before = net
        .node
        .in_namespace(|| bpf::status(&pins))
        .unwrap()
        .unwrap();
    assert_eq!(before.program.as_deref(), Some("mh_guard_v0"));
    assert!(
        !before.holds(),
        "another version's program does not count as this one's"
    );

    let targets = [
        (v4(addr::NODE_PUBLIC_V4), STORE),
        (v6(addr::NODE_PUBLIC_V6), STORE),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let g = probe_loop(
        &net.outside,
        &targets,
        Duration::from_millis(15),
        Duration::ZERO,
        &stop,
    );
    std::thread::sleep(Duration::from_millis(300));
    let r = ensure(&net.node, &pins, &spec());
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let g: Vec<(u32, u32)> = g.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!("guarded (got, probes) through the replacement {targets:?}: {g:?}");
    assert_eq!((r.loaded, r.changed), (Loaded::Replaced, false));
    assert!(
        r.link_ids.iter().all(|id| !old_ids.contains(id)),
        "old {old_ids:?}, new {:?}",
        r.link_ids
    );
    let after = net
        .node
        .in_namespace(|| bpf::status(&pins))
        .unwrap()
        .unwrap();
    assert!(after.holds(), "{after:?}");
    assert_eq!(after.link_ids, r.link_ids);
    assert_eq!(after.contents, before.contents, "the maps were kept");
    for ((to, port), (got, tries)) in targets.iter().zip(&g) {
        assert!(*tries >= 10, "only {tries} probes to {to} port {port}");
        assert_eq!(
            *got, 0,
            "{got} of {tries} connections to {to} port {port} got through"
        );
    }
}

/// Mounts another bpffs over `pins.fs`, hiding what is pinned below it (as a second
/// `mount -t bpf` at boot does); returns a guard that unmounts it.
struct Over(PathBuf);

impl Over {
    fn mount(pins: &Pins) -> Over {
        let out = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&pins.fs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Over(pins.fs.clone())
    }
}

impl Drop for Over {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 reads the NUL-terminated path only.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn held(node: &Machine, pins: &Pins) -> Vec<u32> {
    let mut ids: Vec<u32> = node
        .in_namespace(|| bpf::held(pins))
        .unwrap()
        .unwrap()
        .iter()
        .map(|l| l.id)
        .collect();
    ids.sort();
    ids
}

/// What the kernel holds for this namespace, polled until it is `want` links (a link whose last
/// reference was its pin is released a moment after the unlink), for at most two seconds.
fn held_settles(node: &Machine, pins: &Pins, want: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let ids = held(node, pins);
        if ids.len() == want || Instant::now() >= deadline {
            return ids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sorted(mut ids: Vec<u32>) -> Vec<u32> {
    ids.sort();
    ids
}

#[test]
fn each_namespaces_program_has_its_own_tag() {
    let lab = Lab::new().unwrap();
    let net = Adoption::build(&lab).unwrap();
    let tag = |m: &Machine| {
        m.in_namespace(|| {
            let p = bpf::Program::load().unwrap();
            bpf::sys::prog_info(&p.prog, "guard").unwrap().tag
        })
        .unwrap()
    };
    let (a, b) = (tag(&net.node), tag(&net.peer));
    assert_ne!(a, b, "two namespaces' programs share a tag");
    assert_eq!(a, tag(&net.node), "one namespace's program has one tag");
}

#[test]
fn a_bpffs_mounted_over_the_pins_ends_with_the_same_one_set_of_four_links() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("remount");
    let pins = root.pins();
    let first = ensure(&net.node, &pins, &spec());
    let ids = sorted(first.link_ids.clone());
    assert_eq!(held(&net.node, &pins), ids);
    // A second bpffs over the first: the pins are out of sight, the links still attached.
    let over = Over::mount(&pins);
    let st = net
        .node
        .in_namespace(|| bpf::status(&pins))
        .unwrap()
        .unwrap();
    assert!(st.links.is_empty(), "{st:?}");
    assert_eq!(held(&net.node, &pins), ids, "the kernel still holds them");
    let r = ensure(&net.node, &pins, &spec());
    assert_eq!(r.loaded, Loaded::Found);
    assert_eq!(
        sorted(r.link_ids.clone()),
        ids,
        "the same links, pinned again"
    );
    assert!(r.detached.is_empty(), "{r:?}");
    assert_eq!(held(&net.node, &pins), ids, "exactly one set of four");
    let st = net
        .node
        .in_namespace(|| bpf::status(&pins))
        .unwrap()
        .unwrap();
    assert!(st.holds(), "{st:?}");
    // Again: reclaimed as pinned now.
    let r = ensure(&net.node, &pins, &spec());
    assert_eq!(
        (r.loaded, sorted(r.link_ids)),
        (Loaded::Reclaimed, ids.clone())
    );
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::TimedOut
    );
    assert_eq!(
        probe(&net.peer, v4(addr::NODE_PRIVATE_V4), STORE),
        Probe::Reached
    );
    // Hidden again by a third mount, the layer is still removed whole: none left attached.
    let over2 = Over::mount(&pins);
    assert!(net
        .node
        .in_namespace(|| bpf::remove(&pins))
        .unwrap()
        .unwrap());
    assert_eq!(held_settles(&net.node, &pins, 0), Vec::<u32>::new());
    assert_eq!(
        probe_until_reached(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::Reached
    );
    drop(over2);
    drop(over);
}

#[test]
fn a_deleted_pin_ends_with_exactly_one_set_of_four_links() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("lostpin");
    let pins = root.pins();
    let ids = sorted(ensure(&net.node, &pins, &spec()).link_ids);
    // The program's pin gone (the links hold it): found in the kernel, the same links kept.
    std::fs::remove_file(pins.dir.join("prog")).unwrap();
    let r = ensure(&net.node, &pins, &spec());
    assert_eq!(r.loaded, Loaded::Found);
    assert_eq!(sorted(r.link_ids), ids);
    assert_eq!(held(&net.node, &pins), ids);
    assert!(pins.dir.join("prog").exists());
    // A link's pin gone: that link is released a moment later (and one new one attached in its
    // place), or, caught before its release, pinned again; either way one set of four.
    std::fs::remove_file(pins.dir.join("link-ipv4-input")).unwrap();
    let r = ensure(&net.node, &pins, &spec());
    let now = held_settles(&net.node, &pins, 4);
    assert_eq!(now.len(), 4, "{now:?}");
    assert_eq!(now, sorted(r.link_ids.clone()));
    let kept = ids.iter().filter(|id| now.contains(id)).count();
    assert!(
        kept >= 3,
        "at most the one link replaced: {ids:?} -> {now:?}"
    );
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::TimedOut
    );
    assert_eq!(
        probe(&net.outside, v6(addr::NODE_PUBLIC_V6), STORE),
        Probe::TimedOut
    );
}

/// A link has its id from the moment its maker primes it, and the kernel answers `EAGAIN` for it
/// until the attach settles it or fails. Every survey attaches a probe at each held link's hook
/// for an instant, refused (so primed and freed), so two namespaces surveying at once each meet
/// the other's unsettled probes in the walk of all links: each still reads its own four links,
/// every time, and never fails for the other's.
#[test]
fn a_survey_beside_another_namespaces_refused_attaches_reads_its_own_four_links() {
    let lab = Lab::new().unwrap();
    let net = Adoption::build(&lab).unwrap();
    let (ra, rb) = (PinRoot::new("beside-a"), PinRoot::new("beside-b"));
    let (pa, pb) = (ra.pins(), rb.pins());
    let ids_a = sorted(ensure(&net.node, &pa, &spec()).link_ids);
    let ids_b = sorted(ensure(&net.peer, &pb, &spec()).link_ids);
    let stop = AtomicBool::new(false);
    let survey = |m: &Machine, pins: &Pins, want: &[u32]| -> (usize, Vec<String>) {
        let mut rounds = 0;
        let mut wrong = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            match m.in_namespace(|| bpf::held(pins)).unwrap() {
                Ok(l) => {
                    let got = sorted(l.iter().map(|l| l.id).collect());
                    if got != want {
                        wrong.push(format!("{got:?}"));
                    }
                }
                Err(e) => wrong.push(e.to_string()),
            }
            rounds += 1;
        }
        stop.store(true, Ordering::Relaxed);
        (rounds, wrong)
    };
    let ((na, wa), (nb, wb)) = std::thread::scope(|s| {
        let a = s.spawn(|| survey(&net.node, &pa, &ids_a));
        let b = s.spawn(|| survey(&net.peer, &pb, &ids_b));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        na >= 20 && nb >= 20,
        "too few rounds to mean anything: {na}, {nb}"
    );
    assert!(wa.is_empty(), "the node's survey, {na} rounds: {wa:?}");
    assert!(wb.is_empty(), "the peer's survey, {nb} rounds: {wb:?}");
}
