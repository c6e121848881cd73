//! What this binary was built for: its system and the service and package managers that come
//! with it (one cargo feature per system: `debian`, `arch`, `alpine`), and whether it drives a
//! container runtime. It knows nothing of declarations: why a build refuses a shape is said
//! beside the shapes (`Build::refusal` in `declaration`).

#[cfg(any(
    all(feature = "debian", feature = "arch"),
    all(feature = "debian", feature = "alpine"),
    all(feature = "arch", feature = "alpine"),
))]
compile_error!(
    "mesh-host is built for one system: enable exactly one of the features debian, arch, alpine \
     (for example `--no-default-features --features arch`)"
);

/// What this binary was built for: its system and the service and package managers that come
/// with it. A build without one refuses the shape that needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Build {
    /// The system's name (`debian`, `arch`, `alpine`), or `none` for a partial host.
    pub system: &'static str,
    /// The service manager (`systemd`, `openrc`) and the program the host drives.
    pub service_manager: Option<(&'static str, &'static str)>,
    /// The package manager (`apt`, `pacman`, `apk`) and the program the host drives.
    pub package_manager: Option<(&'static str, &'static str)>,
    /// Whether it drives a container runtime (detected at run time: Docker or Podman).
    pub containers: bool,
}

#[cfg(feature = "debian")]
pub const BUILD: Build = Build {
    system: "debian",
    service_manager: Some(("systemd", "systemctl")),
    package_manager: Some(("apt", "apt-get")),
    containers: true,
};

// Each definition below yields to the ones before it, so that a build with two systems enabled
// stops at the compile_error above and at nothing else.
#[cfg(all(feature = "arch", not(feature = "debian")))]
pub const BUILD: Build = Build {
    system: "arch",
    service_manager: Some(("systemd", "systemctl")),
    package_manager: Some(("pacman", "pacman")),
    containers: true,
};

#[cfg(all(feature = "alpine", not(any(feature = "debian", feature = "arch"))))]
pub const BUILD: Build = Build {
    system: "alpine",
    service_manager: Some(("openrc", "rc-service")),
    package_manager: Some(("apk", "apk")),
    containers: true,
};

#[cfg(not(any(feature = "debian", feature = "arch", feature = "alpine")))]
pub const BUILD: Build = Build {
    system: "none",
    service_manager: None,
    package_manager: None,
    containers: false,
};
