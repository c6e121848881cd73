//! The host's own paths, units and package, which no declaration may name (its binary, its
//! store, its configuration, its unit, its launcher): by name, under the folders they live in.

/// Folders under which anything named after the host is the host's own: its binary, its store,
/// its configuration, its unit and the unit's drop-ins, its init script and that script's
/// settings, its launcher and the launcher's log. A declaration that names one is refused,
/// because the installation owns the host and the host owns the rest.
pub const OWN_FOLDERS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/lib",
    "/usr/libexec",
    "/usr/local/lib",
    "/lib/systemd",
    "/usr/lib/systemd",
    "/etc/systemd",
    "/run/systemd",
    "/etc/init.d",
    "/etc/conf.d",
    "/etc",
    "/var/lib",
    "/var/log",
];

/// The host's own package: the one package name of the host's a declaration may name, at a
/// version, because upgrading the host is an ordinary package resource (seed 000, "Upgrading the
/// host"). The package applier checks that the binary it installs runs before it records it.
pub const OWN_PACKAGE: &str = "mesh-host";

/// Whether a name (a path component, a unit, a package) is the host's: `mesh-host` and anything
/// it names with a suffix (`mesh-host.service`, `mesh-host-launcher`, `mesh-host@x`).
pub fn is_own_name(name: &str) -> bool {
    name == "mesh-host"
        || ["mesh-host.", "mesh-host-", "mesh-host@"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The host's own thing a machine path names, if it names one: a component named after the host
/// under one of [`OWN_FOLDERS`].
pub fn own_path(p: &str) -> Option<&'static str> {
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    OWN_FOLDERS.iter().copied().find(|folder| {
        let depth = folder.split('/').filter(|c| !c.is_empty()).count();
        p.starts_with(&format!("{folder}/")) && parts.iter().skip(depth).any(|c| is_own_name(c))
    })
}
