//! The deadlines of the children, per kind of call, and the kind of a call read from its argv.

use std::time::Duration;

/// The deadlines of the host's children, in seconds, per kind of call: `settings.deadlines` in a
/// declaration, each one optional, the default in its place when absent (docs/operator.md says
/// why each default is what it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Deadlines {
    /// Questions that change nothing: `inspect`, `ps`, `version`, `systemctl show`, `dpkg-query`,
    /// `pacman -Q`, `apk list`, `rc-service … status`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub query_s: Option<u32>,
    /// Container runtime changes: `create` (which pulls a missing image), `start`, `stop`, `rm`,
    /// `network connect`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub container_s: Option<u32>,
    /// Service manager changes: `systemctl start|stop|enable|disable`, `rc-service`, `rc-update`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub service_s: Option<u32>,
    /// Package installs and removals: `apt-get`, `pacman -S`, `apk add`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub package_s: Option<u32>,
    /// Firewall programs: `nft`, `iptables` and `ip6tables` in every variant with their `-save`
    /// and `-restore`, `ebtables`, `arptables`, `ufw` and `ufw-init`, `firewall-cmd`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub firewall_s: Option<u32>,
    /// Any other program: an action's `run` and `verify`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub action_s: Option<u32>,
}

/// The kind of a call, which picks its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Query,
    Container,
    Service,
    Package,
    Firewall,
    Action,
}

impl Kind {
    /// The default deadline of each kind, in seconds.
    pub const fn default_s(self) -> u32 {
        match self {
            Kind::Query => 60,
            Kind::Container => 300,
            Kind::Service => 120,
            Kind::Package => 900,
            Kind::Firewall => 60,
            Kind::Action => 600,
        }
    }

    /// What kind of call `argv` is, read from its program and verb.
    pub fn of(argv: &[String]) -> Kind {
        let program = argv
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or_default();
        let mut words = argv
            .iter()
            .skip(1)
            .map(String::as_str)
            .filter(|a| !a.starts_with('-'));
        let first = words.next().unwrap_or_default();
        let second = words.next().unwrap_or_default();
        let has = |w: &str| argv.iter().skip(1).any(|a| a == w);
        match program {
            "docker" | "podman" => {
                let reads = ["inspect", "ls", "list", "ps", "version", "info", "images"];
                let objects = ["container", "network", "image", "volume", "system"];
                if reads.contains(&first) || (objects.contains(&first) && reads.contains(&second)) {
                    Kind::Query
                } else {
                    Kind::Container
                }
            }
            "systemctl" => match first {
                "show" | "status" | "is-active" | "is-enabled" | "is-failed" | "cat"
                | "list-units" | "list-unit-files" => Kind::Query,
                _ => Kind::Service,
            },
            "rc-service" if has("status") || has("--exists") || has("-e") => Kind::Query,
            "rc-update" if first == "show" => Kind::Query,
            "rc-status" => Kind::Query,
            "rc-service" | "rc-update" | "openrc" => Kind::Service,
            "dpkg-query" => Kind::Query,
            "pacman" if argv.get(1).is_some_and(|a| a.starts_with("-Q")) => Kind::Query,
            "apk" if matches!(first, "list" | "info" | "policy" | "search") => Kind::Query,
            "apt-get" | "apt" | "dpkg" | "pacman" | "apk" => Kind::Package,
            p if is_firewall_program(p) => Kind::Firewall,
            _ => Kind::Action,
        }
    }
}

impl Deadlines {
    /// The deadline of one kind of call: the declared one, else the default.
    pub fn of(&self, kind: Kind) -> Duration {
        let declared = match kind {
            Kind::Query => self.query_s,
            Kind::Container => self.container_s,
            Kind::Service => self.service_s,
            Kind::Package => self.package_s,
            Kind::Firewall => self.firewall_s,
            Kind::Action => self.action_s,
        };
        Duration::from_secs(u64::from(declared.unwrap_or(kind.default_s())))
    }

    /// The deadline of the call `argv`.
    pub fn for_argv(&self, argv: &[String]) -> Duration {
        self.of(Kind::of(argv))
    }
}

/// Whether `program` (a file name) is one of the firewall's: iptables' restore waits at most 5 s
/// for the xtables lock and a save of a large table takes well under a second, so these share a
/// deadline of their own, shorter than an action's.
fn is_firewall_program(program: &str) -> bool {
    ["iptables", "ip6tables", "ebtables", "arptables"]
        .iter()
        .any(|p| program == *p || program.strip_prefix(p).is_some_and(|r| r.starts_with('-')))
        || matches!(
            program,
            "nft" | "ufw" | "ufw-init" | "firewall-cmd" | "firewall-offline-cmd"
        )
}
