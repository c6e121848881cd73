//! Helpers shared by the lab tests of the found firewalls that are daemons or keep files
//! (firewalld, ufw): their configuration read byte for byte, a probe that must not be answered,
//! what the flip through the binary leaves, and the stub service manager.

use super::*;
use std::collections::BTreeMap;

/// Every file under `dir` with its bytes, to compare a configuration byte for byte.
pub(super) fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Probes `port` on each address from `from` and insists it is not answered: refused,
/// unreachable or silent, whichever the found firewall does.
pub(super) fn not_reached(from: &Machine, addrs: &[IpAddr], port: u16, why: &str) {
    for addr in addrs {
        let got = from.probe_tcp(*addr, port, SILENCE).unwrap();
        assert_ne!(
            got,
            Probe::Reached,
            "{why}: {} -> [{addr}]:{port}",
            from.name()
        );
    }
}

/// What the flip through the binary leaves, whatever the found firewall: the mesh's derived
/// filter in force (its input chain, policy drop), the declared port reached, the served port
/// nothing declares closed, the store reached over the private network; `unit` disabled through
/// the stub `systemctl` in `stub`, never stopped.
pub(super) fn flipped_to_the_derived_filter(net: &Adoption, stub: &Path, unit: &str) {
    let public = node_public();
    let mesh = run_ok(&net.node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(
        mesh.contains("chain input") && mesh.contains("policy drop"),
        "{mesh}"
    );
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "converged: the declared port",
    );
    not_reached(&net.peer, &public, SERVED, "converged: undeclared, closed");
    expect(
        &net.peer,
        &node_private(),
        STORE,
        Probe::Reached,
        "converged: the store over the private network",
    );
    let log = std::fs::read_to_string(stub.join("log")).unwrap_or_default();
    assert!(log.contains(&format!("disable {unit}")), "{log}");
    assert!(
        !log.contains("stop"),
        "the unit was stopped through systemd: {log}"
    );
}

/// A stub `systemctl` first on PATH, standing in for systemd as PID 1 (which cannot run here):
/// it answers `show` as an enabled, active unit and logs every call to `dir/log`.
pub(super) fn stub_systemctl(dir: &Path) {
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {log}\nif [ \"$1\" = show ]; then\n  \
         printf 'LoadState=loaded\\nActiveState=active\\nUnitFileState=enabled\\n'\nfi\nexit 0\n",
        log = dir.join("log").display()
    );
    let path = dir.join("systemctl");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
